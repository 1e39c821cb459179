"""The daemon: the spec, the record, ownership, the driver, the embedded Ray, the cluster connection and its authentication, the KV store."""
