"""Scenario files in, a validated Scenario out: schema, loading, --set overrides, building."""
