"""The compendium machinery: paths, profiles, the claims ledger, the notebook runner,
the offline corpus loader, plotting and provenance.

Nothing here has import-time side effects (no seeding, no downloads, no file writes).
"""
