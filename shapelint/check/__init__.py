"""Check: discover the rules (the shipped ``shapelint.rules`` and ``--rules-dir``),
select them, and run them over the captured GEMM records. Each rule returns
proposals, never a price: pricing is ``shapelint.price``'s job.

Entry: :func:`shapelint.check.run.run_rules`. The API a rule is written against
(:class:`~shapelint.check.rule_api.Rule`, its context and helpers) is
:mod:`.rule_api`.
"""
