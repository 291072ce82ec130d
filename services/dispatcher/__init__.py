"""The reput loop across processes: ReadRange from the commitlog, PutUnits/PutKeys to the builders, its servicer, host and actor."""
