package traces

import (
	"sync"

	"github.com/gpualloc/gpualloc/snapshot"
)

// Snapshot returns the snapshot that the reader read, whole, as it read it:
// with its stacks when Options.Stacks asked for them. A caller that needs
// the snapshot's entries beside the events (simulate explain matches them
// for the call sites) takes it here rather than reading the file twice.
func (r *snapshotReader) Snapshot() *snapshot.Snapshot { return r.snap }

// Start returns the state of the allocator when the snapshot's trace
// began (see [Start]): each device's as the snapshot records it (see
// [snapshot.Snapshot.InitialState]), the reader's first events the live
// blocks of these states in the order of [startBlocks]; the snapshot's
// recorded settings ([snapshot.Snapshot.Conf]); and its private pools'
// allocations and segments (see privateAllocs and poolSegments). Found
// on the first call, the pool segments in O(entries log events), and
// kept: the replays of a sweep share the reader and its Start.
func (r *snapshotReader) Start() *Start {
	r.begin.once.Do(func() {
		r.begin.start = &Start{States: r.states, Initial: len(r.start), Conf: r.snap.Conf(), Private: r.private, PrivatePools: r.pools, PoolSegments: r.poolSegments()}
		st := r.begin.start
		st.Release, st.ReleaseWhy = r.snap.Release()
	})
	return r.begin.start
}

// A startMemo is what Start returns, found once.
type startMemo struct {
	once  sync.Once
	start *Start
}
