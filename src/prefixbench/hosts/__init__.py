"""Hosts: what a Neuron host must have, whether it may be changed, and what it ran.

:mod:`.releases` (Neuron SDK release manifests), :mod:`.instances` (the Trn instance
catalogue), :mod:`.provision` (decisions before a host is changed), :mod:`.collect` and
:mod:`.fingerprint` (what a host ran), :mod:`.ec2` (the EC2 inventory's selection).
"""
