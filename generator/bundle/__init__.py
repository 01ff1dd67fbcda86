"""Bundle layer: the certificate bundle's records, evidence, obligations, report, dashboard, signing."""
