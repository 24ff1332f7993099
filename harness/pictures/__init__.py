"""Pictures, with matplotlib imported only by what draws."""
