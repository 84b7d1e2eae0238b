"""PyYAML's safe loader as PRD files need it: JSON values only, keys as written.

Imported only when a YAML file is read or a position in a file is looked up (the positions
of JSON files are found by composing them as YAML): loading a JSON PRD does not import
PyYAML at all.
"""

from __future__ import annotations

import collections.abc
import re
from typing import Any

import yaml

__all__ = ["YAML_LOADER", "PRDLoader"]

_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class PRDLoader(_SAFE_LOADER):  # type: ignore[valid-type,misc]
    """PyYAML's safe loader (C-accelerated when available) that reads JSON values only:
    unquoted dates and times (``2024-05-01``) stay strings, numbers and booleans are read
    in JSON's forms only (``010``, ``0x1F``, ``12:30``, ``.inf``, ``yes`` and ``off`` stay
    strings), and a mapping key
    written as a plain value is the text as written (``on:`` is the key ``"on"``, not YAML
    1.1's ``true``; ``1:`` is ``"1"``)."""

    #: A key repeated in one mapping (before merge keys are applied), or ``None``.
    repeated_key: str | None = None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """As PyYAML's, except that scalar keys are their text as written; a repeated key
        is noted in :attr:`repeated_key`."""
        if self.repeated_key is None and len(node.value) > 1:
            keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode)]
            if len(set(keys)) < len(keys):
                self.repeated_key = next(k for i, k in enumerate(keys) if k in keys[:i])
        self.flatten_mapping(node)  # merge keys (<<: *base), as the safe loader does
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key: Any = key_node.value
            else:
                key = self.construct_object(key_node, deep=deep)
                if not isinstance(key, collections.abc.Hashable):
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        "found a key that is a list or a mapping", key_node.start_mark)
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping


#: Plain YAML scalars that are numbers or booleans: JSON's forms only (and ``True``/``TRUE``,
#: as YAML 1.2 has them). YAML 1.1 also reads ``010`` as 8, ``0x1F`` as 31, ``12:30`` as 750,
#: ``1_000`` as 1000, ``.inf``, and ``yes``/``no``/``on``/``off`` as booleans; in a PRD those
#: stay the text as written, so an id ``010`` is ``"010"`` and a title ``No`` is ``"No"``.
_YAML_INT = re.compile(r"^-?(?:0|[1-9][0-9]*)$")
_YAML_FLOAT = re.compile(r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?$")
_YAML_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")
_NOT_JSON_TAGS = {"tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:int",
                  "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool",
                  "tag:yaml.org,2002:value"}
PRDLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _NOT_JSON_TAGS]
    for first, resolvers in _SAFE_LOADER.yaml_implicit_resolvers.items()
}
PRDLoader.add_implicit_resolver("tag:yaml.org,2002:bool", _YAML_BOOL, list("tTfF"))
PRDLoader.add_implicit_resolver("tag:yaml.org,2002:int", _YAML_INT, list("-0123456789"))
PRDLoader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML_FLOAT, list("-0123456789"))

#: The YAML loader used for PRDs: PyYAML's safe loader (the C one when available), which
#: constructs no objects (``!!python/object`` tags are an error), with dates left as text.
YAML_LOADER: type[yaml.SafeLoader] = PRDLoader
