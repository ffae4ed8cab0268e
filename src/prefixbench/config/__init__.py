"""Settings: every variable declared once, and the tutorial's constraints on them.

:mod:`.catalogue` declares each setting (type, default, role); :mod:`.settings`
validates a host's variables against it and the rules of :mod:`.rules` (the tutorial's
constraints, one line per problem) and :mod:`.rules_fit` (the model on Neuron: the
weights-fit arithmetic of :mod:`.modelfit`, the AWS recipes of :mod:`.recipes`, which
also give preflight's warnings);
:mod:`.rolespecs` generates the roles' argument specs
and defaults from the catalogue; :mod:`.plan` says what runs where before anything runs.
"""
