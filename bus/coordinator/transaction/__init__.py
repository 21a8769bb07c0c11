"""The transaction coordinator: transactional ids, producer epochs, and two-phase commit markers."""
