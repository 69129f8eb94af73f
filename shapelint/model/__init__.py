"""The data every stage shares: GEMM records, proposals and findings, and their inert JSON form."""
