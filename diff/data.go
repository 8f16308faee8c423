package diff

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpualloc/gpualloc/dataset"
	"github.com/gpualloc/gpualloc/explain"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
	"github.com/gpualloc/gpualloc/traces"
)

// WriteEvents writes to w a row for each event of t, measured as run:
// the trace replayed as it ran (Strategy is run's), each row with the
// event's site (as explain names it, for an alloc and for the free of
// its allocation; "" for another event), the live bytes of its device
// after it, and the bytes the replay's allocator had allocated and
// reserved on that device then; index is the event's among its device's
// events, as simulate --parquet writes it. It streams: a replay of t,
// whose rows are written as it serves each event, and a map of the live
// allocations' sites.
func WriteEvents(ctx context.Context, w *dataset.EventWriter, t *explain.Trace, run *Run, o Options) error {
	stacks := explain.NewStackIndex(t)
	by := o.By
	if by == "" {
		by = explain.BySite
	}
	sites := map[int32]string{} // the site of each live allocation, by slot
	var index []int64           // the events of each device so far
	e := dataset.Event{Trace: t.Name, Strategy: run.Strategy}
	_, err := explain.ReplayEach(ctx, t, explain.Options{Capacity: o.Capacity}, run.params, func(n int64, ev *traces.Event, after sim.DeviceBytes) error {
		d := int(ev.Device)
		if d >= len(index) {
			index = append(index, make([]int64, d+1-len(index))...)
		}
		e.Device, e.Index, e.Action, e.Size = ev.Device, index[d], ev.Op.String(), ev.Size
		index[d]++
		e.TimeUS = ev.TimeUS
		if e.TimeUS == traces.NoTime {
			e.TimeUS = -1
		}
		e.Address = 0
		if a, hex := ev.HexID(); hex {
			e.Address = a
		}
		e.Site = ""
		switch ev.Op {
		case traces.OpAlloc:
			e.Site = stacks.Key(by, int(n))
			sites[ev.Slot] = e.Site
		case traces.OpFree:
			e.Site = sites[ev.Slot]
			delete(sites, ev.Slot)
		}
		e.Live, e.Allocated, e.Reserved = after.Requested, after.Allocated, after.Reserved
		return w.Write(&e)
	})
	return err
}

// A SiteRow is a row of sites.parquet: a group of one run's live bytes at
// its peak.
type SiteRow struct {
	Trace  string `parquet:"trace,dict"`
	Device int32  `parquet:"device"`
	Site   string `parquet:"site,dict"`
	Bytes  int64  `parquet:"bytes"`
	Count  int64  `parquet:"count"`
}

// A SiteDiffRow is a row of site_diffs.parquet: a SiteDiff of a pair.
type SiteDiffRow struct {
	A          string `parquet:"a,dict"`
	B          string `parquet:"b,dict"`
	Device     int32  `parquet:"device"`
	Site       string `parquet:"site,dict"`
	Change     string `parquet:"change,dict"`
	ABytes     int64  `parquet:"a_bytes"`
	BBytes     int64  `parquet:"b_bytes"`
	DeltaBytes int64  `parquet:"delta_bytes"`
	ACount     int64  `parquet:"a_count"`
	BCount     int64  `parquet:"b_count"`
}

// A RankSiteRow is a row of rank_sites.parquet: a RankSite of a summary.
type RankSiteRow struct {
	Device      int32  `parquet:"device"`
	Site        string `parquet:"site,dict"`
	MinBytes    int64  `parquet:"min_bytes"`
	MedianBytes int64  `parquet:"median_bytes"`
	MaxBytes    int64  `parquet:"max_bytes"`
	MinRank     string `parquet:"min_rank,dict"`
	MaxRank     string `parquet:"max_rank,dict"`
}

// SiteRows returns the site tables of runs, a row per site of each
// device of each run.
func SiteRows(runs []*Run) []SiteRow {
	rows := []SiteRow{}
	for _, r := range runs {
		for _, d := range r.Devices {
			for _, s := range d.Sites {
				rows = append(rows, SiteRow{Trace: r.Trace, Device: int32(d.Device), Site: s.Site, Bytes: s.Bytes, Count: s.Count})
			}
		}
	}
	return rows
}

// SiteDiffRows returns the sites of pairs, a row each.
func SiteDiffRows(pairs []Pair) []SiteDiffRow {
	rows := []SiteDiffRow{}
	for _, p := range pairs {
		for _, s := range p.Sites {
			rows = append(rows, SiteDiffRow{A: p.A, B: p.B, Device: int32(p.Device), Site: s.Site, Change: s.Change,
				ABytes: s.ABytes, BBytes: s.BBytes, DeltaBytes: s.DeltaBytes, ACount: s.ACount, BCount: s.BCount})
		}
	}
	return rows
}

// RankSiteRows returns the sites of summaries, a row each.
func RankSiteRows(sums []Summary) []RankSiteRow {
	rows := []RankSiteRow{}
	for _, s := range sums {
		for _, r := range s.Sites {
			rows = append(rows, RankSiteRow{Device: int32(s.Device), Site: r.Site, MinBytes: r.MinBytes, MedianBytes: r.MedianBytes,
				MaxBytes: r.MaxBytes, MinRank: r.MinRank, MaxRank: r.MaxRank})
		}
	}
	return rows
}

// WriteTable writes rows as the Parquet file name of the report d.
func WriteTable[T any](d *report.DirWriter, name string, rows []T) error {
	tmp, err := os.MkdirTemp("", "diff-table-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	p := filepath.Join(tmp, name)
	if err := dataset.WriteTable(p, rows); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(d.Dir(), name), err)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return d.WriteFile(name, data)
}
