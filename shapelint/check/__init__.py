"""Check: discover and run the rules; each returns proposals, never a price."""
