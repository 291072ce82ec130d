"""The commitlog writer: its servicer (CommitLogService), its state (the shard's open), its host and its Ray actor."""
