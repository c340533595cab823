"""protot package."""
