"""Helpers that several rule families share (this package declares no family; the registry skips it).

- :mod:`.calls`: binding a call's arguments by the source signature, literal values, writing calls;
- :mod:`.statements`: the statement a call stands in (assignment, ``with`` item), to add lines after it;
- :mod:`.class_strings`: classes named by a dotted string (registries, config files).
"""
