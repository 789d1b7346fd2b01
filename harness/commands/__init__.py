"""Commands that orchestrate the layers below them (measure, model, reports): nothing
below imports this package."""
