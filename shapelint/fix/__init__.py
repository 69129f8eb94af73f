"""Fix: turn findings' suggestions into edits of the files that set the sizes (--diff, --fix)."""
