"""The ledger of published runs behind docs/validation.md: rows, scenarios, errors, fit."""
