package traces

import "github.com/gpualloc/gpualloc/snapshot"

// Snapshot returns the snapshot that the reader read, whole, as it read it:
// with its stacks when Options.Stacks asked for them. A caller that needs
// the snapshot's entries beside the events (simulate explain matches them
// for the call sites) takes it here rather than reading the file twice.
func (r *snapshotReader) Snapshot() *snapshot.Snapshot { return r.snap }
