"""Reports made from results: tables, figures and the run record."""
