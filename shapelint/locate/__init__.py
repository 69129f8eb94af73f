"""Locate: point a finding at the line or config key the user owns, and read suppression comments."""
