"""Pydantic models of the API's requests and responses, one module per resource."""
