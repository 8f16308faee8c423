package cli

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpualloc/gpualloc"
	"github.com/gpualloc/gpualloc/sim"
	"github.com/gpualloc/gpualloc/sim/report"
)

// ShardFile is the file in which a shard's -o DIR keeps what 'simulate
// merge' reads: every result of the shard whole (series and devices
// included), the request sizes of its traces, and which part of which run
// it is.
const ShardFile = "shard.json.gz"

// A shard is the part k of n (1 <= k <= n) of a run that --shard names;
// n = 0 when the flag is not given.
type shard struct{ k, n int }

// parseShard parses --shard's "k/n".
func parseShard(s string) (shard, error) {
	if s == "" {
		return shard{}, nil
	}
	ks, ns, ok := strings.Cut(s, "/")
	k, err1 := strconv.Atoi(strings.TrimSpace(ks))
	n, err2 := strconv.Atoi(strings.TrimSpace(ns))
	if !ok || err1 != nil || err2 != nil || n < 1 || k < 1 || k > n {
		return shard{}, usagef("--shard %q: want k/n with 1 <= k <= n, as 2/8", s)
	}
	return shard{k, n}, nil
}

// jobs returns the jobs of the shard among total, [lo, hi): the k-th of n
// contiguous parts whose sizes differ by one at most.
func (s shard) jobs(total int) (lo, hi int) {
	return mulDiv(s.k-1, total, s.n), mulDiv(s.k, total, s.n)
}

// mulDiv returns a*b/c for 0 <= a <= c and b >= 0, c > 0, without the
// overflow of a*b: the product is taken in 128 bits.
func mulDiv(a, b, c int) int {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int(q)
}

// runID identifies a run by what its results depend on: the backend, the
// capacity, lenience, the traces (names and sizes) and the strategies
// (full specs), in order. The shards of one command line share it.
func runID(f replayFlags, capacity int64, inputs []*input, strategies []*gpualloc.Params) string {
	h := sha256.New()
	fmt.Fprintf(h, "gpualloc run v1\nbackend %s\ncapacity %d\nlenient %t\n", f.backend, capacity, f.lenient)
	for _, in := range inputs {
		fmt.Fprintf(h, "trace %q %d\n", in.name, in.size)
	}
	for _, p := range strategies {
		fmt.Fprintf(h, "strategy %q\n", p.String())
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// shardData is the content of ShardFile.
type shardData struct {
	Run    string `json:"run"`
	Shard  int    `json:"shard"`
	Shards int    `json:"shards"`
	// Jobs is the number of jobs of the whole run; the shard's are
	// First to First+len(Rows)-1.
	Jobs  int                              `json:"jobs"`
	First int                              `json:"first"`
	Rows  []*shardRow                      `json:"rows"`
	Sizes map[string]*report.SizeHistogram `json:"sizes"`
	// Failed is the first error of the shard's replays that failed, ""
	// when none did.
	Failed string `json:"failed"`
}

// shardRow is a result with the parts that summaries leave out: its
// devices, its series, and its strategy's parameters, which the strategy's
// spec alone does not give (their defaults, what a sweep chose, the
// settings of a value made of several), so that the merged report reads
// the same structure as the report of the whole run.
type shardRow struct {
	Result  sim.Result          `json:"result"`
	Devices []sim.DeviceResult  `json:"devices"`
	Series  *sim.Series         `json:"series"`
	Params  []sim.StrategyParam `json:"params"`
}

// writeShard writes a shard's summaries and ShardFile with d.
func writeShard(dw *report.DirWriter, sh shard, run string, first, total int, out []sim.JobResult, sizes map[string]*report.SizeHistogram) error {
	d := shardData{Run: run, Shard: sh.k, Shards: sh.n, Jobs: total, First: first, Sizes: sizes}
	var results []sim.Result
	for _, o := range out {
		if o.Err != nil {
			if d.Failed == "" {
				d.Failed = oneLine(o.Err.Error())
			}
			continue
		}
		results = append(results, o.Result)
		d.Rows = append(d.Rows, &shardRow{Result: o.Result, Devices: o.Result.Devices, Series: o.Result.Series, Params: o.Result.Strategy.Params})
	}
	var b bytes.Buffer
	for _, f := range []struct {
		name  string
		write func(w io.Writer) error
	}{
		{report.SummaryCSV, func(w io.Writer) error { return report.WriteCSV(w, results) }},
		{report.SummaryJSON, func(w io.Writer) error { return report.WriteJSON(w, results) }},
		{ShardFile, func(w io.Writer) error {
			zw := gzip.NewWriter(w)
			if err := json.NewEncoder(zw).Encode(d); err != nil {
				return err
			}
			return zw.Close()
		}},
	} {
		b.Reset()
		if err := f.write(&b); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dw.Dir(), f.name), err)
		}
		if err := dw.WriteFile(f.name, b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}
