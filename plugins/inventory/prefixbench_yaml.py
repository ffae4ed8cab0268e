"""Inventory plugin: Ansible's own ``yaml`` inventory, after the bundle's YAML check.

A ``.yml``/``.yaml``/``.json`` file that does not parse (or gives a key twice) is left
unread here, so that the prefixbench_yaml_check vars plugin names it in one line,
``file:line:column: what is wrong``, once the inventory is read and before any host is
touched; Ansible's own message for it is a dozen lines ending "No inventory was parsed".
Every other file goes to ``ansible.builtin.yaml`` unchanged (a file without a suffix too,
which may be an INI inventory for the next plugin).
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseFileInventoryPlugin
from ansible.plugins.loader import inventory_loader

from prefixbench.measure.yamlfile import YAML_SUFFIXES, yaml_file_problem

DOCUMENTATION = r"""
name: prefixbench_yaml
short_description: Ansible's YAML inventory, read after the bundle's YAML check
description:
  - Reads the files C(ansible.builtin.yaml) reads, with it.
  - Leaves a C(.yml), C(.yaml) or C(.json) file that is not valid YAML, or gives a key
    twice, unread, for the C(prefixbench_yaml_check) vars plugin to report in one line.
author: prefixbench
"""


class InventoryModule(BaseFileInventoryPlugin):
    NAME = "prefixbench_yaml"

    @staticmethod
    def _builtin() -> Any:
        plugin = inventory_loader.get("ansible.builtin.yaml")
        if plugin is None:
            raise AnsibleParserError("the ansible.builtin.yaml inventory plugin is missing")
        return plugin

    def verify_file(self, path: str) -> bool:
        return bool(self._builtin().verify_file(path))

    def parse(self, inventory: Any, loader: Any, path: str, cache: bool = True) -> None:
        if path.endswith(YAML_SUFFIXES) and yaml_file_problem(path) is not None:
            return  # reported, in one line, by the prefixbench_yaml_check vars plugin
        self._builtin().parse(inventory, loader, path, cache=cache)
