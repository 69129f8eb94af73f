"""shapelint's rules: one module per rule (installed as ``shapelint.rules``).

See ``shapelint.rule_api`` for what a rule module holds; ``shapelint.engine``
discovers every module here (and in ``--rules-dir``) and refuses duplicate codes.
"""
