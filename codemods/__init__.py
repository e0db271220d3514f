"""porter's rule families (installed as ``porter.codemods``).

Each module defines ``FAMILY`` (a :class:`porter.framework.Family`): its rules, text
pre-filter tokens, a LibCST visitor for Python and/or checkers for other languages.
"""
