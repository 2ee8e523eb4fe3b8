"""What is built on decoded topics for analysis and training: tables, export, a synced dataset, Dask.

- :mod:`.tables`: a TopicArray as a pandas DataFrame, an Arrow table, a Polars
  DataFrame or an Awkward array (the optional libraries load on first use);
- :mod:`.export`: whole bags to Parquet, CSV or NPZ files;
- :mod:`.dataset`: :class:`SyncedDataset`, time-aligned multi-sensor samples, and :func:`collate`;
- :mod:`.dask`: topics of many bags as Dask DataFrames and arrays.

Nothing here is imported by ``import fastbag`` beyond what is NumPy-only.
"""
