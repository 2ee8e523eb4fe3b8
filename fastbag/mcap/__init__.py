"""The MCAP container (format version 0): records, summary and indexes, recovery by scanning."""
