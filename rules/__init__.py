"""shapelint's rules: one module per rule (installed as ``shapelint.rules``).

See ``shapelint.check.rule_api`` for what a rule module holds; ``shapelint.engine``
discovers every module here (and in ``--rules-dir``) and refuses duplicate codes.
"""
