"""web: see ../shared/design/ARCHITECTURE.md; filled in by later issues."""
