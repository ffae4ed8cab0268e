"""Vars plugin: stop on a broken YAML file of the inventory, in one line, before any host.

A thin adapter over :func:`prefixbench.measure.yamlfile.inventory_yaml_problem`: once
Ansible has read the inventory (stage ``inventory``, before the first play, and for
``--list-hosts`` and ``--syntax-check`` too), it parses the inventory's YAML files, its
``group_vars`` and ``host_vars`` and fails with ``file:line:column: what is wrong``.
Without it, Ansible names neither the file nor the line of a broken ``group_vars`` file
("YAML parsing failed: Mapping values are not allowed in this context.") and takes a key
given twice without a word. Enabled in ansible.cfg (``vars_plugins_enabled``), before
``host_group_vars``; it adds no variable.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleParserError
from ansible.plugins.vars import BaseVarsPlugin

from prefixbench.measure.yamlfile import inventory_files_state, inventory_yaml_problem

DOCUMENTATION = r"""
name: prefixbench_yaml_check
short_description: Fail in one line on a broken YAML file of the inventory
description:
  - Parses every YAML file of each inventory source (the file, or the directory's YAML
    files) and its C(group_vars) and C(host_vars), and fails with one line,
    C(file:line:column) and what is wrong, on the first one that does not parse or gives
    a key twice, before any host is touched.
  - Adds no variable.
author: prefixbench
options:
  stage:
    description:
      - When to check. C(inventory), the default, is once the inventory is read, before
        the first play.
    type: str
    default: inventory
    choices: [all, inventory, task]
    ini:
      - key: stage
        section: vars_prefixbench_yaml_check
    env:
      - name: ANSIBLE_VARS_PREFIXBENCH_YAML_CHECK_STAGE
"""


#: Inventory paths found clean in this process, with their files' state then
#: (:func:`inventory_files_state`). Per process, not per instance: ansible-core makes a new
#: instance of this plugin for each group and host it reads the inventory for (2.21,
#: ``vars_loader.get`` in ``ansible/vars/plugins.py``), so a cache on the instance never hit
#: and every group and host parsed the whole inventory again (8 parses for the sample
#: inventory's 3 hosts and 5 groups, 9 ms each). A file changed since is parsed again.
_CLEAN: dict[str, tuple[tuple[str, int, int], ...]] = {}


class VarsModule(BaseVarsPlugin):
    REQUIRES_ENABLED = True

    def get_vars(self, loader: Any, path: str, entities: Any, cache: bool = True) -> dict[str, Any]:
        super().get_vars(loader, path, entities)
        state = inventory_files_state(path)
        if _CLEAN.get(path) != state:
            problem = inventory_yaml_problem(path)
            if problem is not None:
                raise AnsibleParserError(problem)
            _CLEAN[path] = state
        return {}
