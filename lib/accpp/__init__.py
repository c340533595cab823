"""accpp package."""
