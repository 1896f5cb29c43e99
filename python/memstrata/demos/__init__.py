"""Demo parts, one module each, wired into ``make demo`` by ``memstrata.demo``."""
