package cli

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shardArgs is a sweep of 2 traces through 5 strategies: 10 replays, in
// shards of 3, 3 and 4, which split the replays of the second trace.
var shardArgs = []string{"--plot-format", "svg", "-s", "round:cutoff=20..22", "-s", "naive", "-s", "pytorch", "testdata/tiny.csv", "testdata/twodev.csv"}

// runShards runs shardArgs in n shards, each into a directory of its own,
// and returns the directories.
func runShards(t *testing.T, n int, extra ...string) []string {
	var dirs []string
	for k := 1; k <= n; k++ {
		dir := filepath.Join(t.TempDir(), "shard")
		args := append([]string{"--shard", fmt.Sprintf("%d/%d", k, n), "-o", dir}, extra...)
		code, _, stderr := run(t, nil, append(args, shardArgs...)...)
		require.Equal(t, 0, code, stderr)
		dirs = append(dirs, dir)
	}
	return dirs
}

// TestMergeEqualsUnsharded runs a sweep whole and in three shards, and
// checks that merging the shards gives the same report, file for file
// (timings aside), and the same table.
func TestMergeEqualsUnsharded(t *testing.T) {
	whole := filepath.Join(t.TempDir(), "whole")
	code, wantTable, stderr := run(t, nil, append([]string{"-o", whole}, shardArgs...)...)
	require.Equal(t, 0, code, stderr)

	dirs := runShards(t, 3)
	// Shards in any order.
	merged := filepath.Join(t.TempDir(), "merged")
	code, table, stderr := run(t, nil, "merge", "--plot-format", "svg", "-o", merged, dirs[2], dirs[0], dirs[1])
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, wantTable, table)

	want, err := os.ReadDir(whole)
	require.NoError(t, err)
	got, err := os.ReadDir(merged)
	require.NoError(t, err)
	require.Equal(t, len(want), len(got))
	for i, e := range want {
		require.Equal(t, e.Name(), got[i].Name())
		a, err := os.ReadFile(filepath.Join(whole, e.Name()))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(merged, e.Name()))
		require.NoError(t, err)
		switch e.Name() {
		case "summary.csv", "summary.json":
			assert.Equal(t, normalize(string(a)), normalize(string(b)), e.Name())
		default:
			assert.Equal(t, string(a), string(b), e.Name())
		}
	}
}

// TestMergeKeepsStrategies checks that the merged results carry their
// strategies whole, as the run's own did: the parameters' defaults and what
// the sweep chose, which the summaries' spec alone does not hold.
func TestMergeKeepsStrategies(t *testing.T) {
	results, _, err := mergeShards(runShards(t, 3))
	require.NoError(t, err)
	require.Len(t, results, 10)
	for _, r := range results {
		require.NotEmpty(t, r.Strategy.Params, r.Strategy.Spec)
		for _, p := range r.Strategy.Params {
			assert.NotEmpty(t, p.Default, "%s: %s", r.Strategy.Spec, p.Key)
			assert.Equal(t, r.Strategy.Name == "round" && p.Key == "cutoff", p.Swept, "%s: %s", r.Strategy.Spec, p.Key)
		}
	}
}

func TestMergeRefuses(t *testing.T) {
	dirs := runShards(t, 3)
	other := runShards(t, 3, "--capacity", "1GiB")
	two := runShards(t, 2)
	notShard := t.TempDir()
	out := filepath.Join(t.TempDir(), "out")
	for _, tc := range []struct {
		dirs []string
		want string
	}{
		{[]string{dirs[0], dirs[2]}, "simulate: merge: missing 1 of 3 shards: 2/3\n"},
		{[]string{dirs[0], dirs[1], dirs[1], dirs[2]}, "simulate: merge: " + dirs[1] + " and " + dirs[1] + " are both shard 2/3\n"},
		{[]string{dirs[0], other[1], dirs[2]}, "simulate: merge: " + dirs[0] + " and " + other[1] + " are shards of different runs (their traces, strategies or flags differ)\n"},
		{[]string{dirs[0], two[1]}, "simulate: merge: " + dirs[0] + " and " + two[1] + " are shards of different runs (their traces, strategies or flags differ)\n"},
		{[]string{notShard}, "simulate: merge: " + notShard + ": no shard.json.gz: not the output of simulate --shard k/n -o DIR\n"},
	} {
		code, stdout, stderr := run(t, nil, append([]string{"merge", "-o", out}, tc.dirs...)...)
		assert.Equal(t, 1, code, stderr)
		assert.Empty(t, stdout)
		assert.Equal(t, tc.want, stderr)
	}
	_, err := os.Stat(out)
	assert.ErrorIs(t, err, os.ErrNotExist, "no report from a refused merge")
}

func TestShardGolden(t *testing.T) {
	goldenRuns(t, []goldenCase{
		{"shard_2_of_3", nil, []string{"--shard", "2/3", "-s", "round:cutoff=20..22", "testdata/tiny.csv", "testdata/twodev.csv"}, 0},
		{"err_shard", nil, []string{"--shard", "4/3", "testdata/tiny.csv"}, 2},
		{"err_shard_syntax", nil, []string{"--shard", "1-3", "testdata/tiny.csv"}, 2},
		{"err_merge_no_out", nil, []string{"merge", "testdata"}, 2},
		{"err_merge_no_dir", nil, []string{"merge", "-o", "x"}, 2},
	})
}

// FuzzMergeShard gives merge a shard file of any bytes, seeded with a
// real one gzipped and plain: merge never panics, and refuses what it
// cannot use with one line naming the file.
func FuzzMergeShard(f *testing.F) {
	one := []byte(`{"run":"x","shard":1,"shards":1,"jobs":1,"first":0,"rows":[{"result":{"trace":"t.csv","strategy":"naive"}}]}`)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(one)
	zw.Close()
	f.Add(gz.Bytes())
	f.Add(one)
	f.Add([]byte(`{"run":"x","shard":1,"shards":1,"jobs":1,"first":0,"rows":[null]}`))
	f.Add([]byte{0x1f, 0x8b})
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, ShardFile), data, 0o644))
		results, _, err := mergeShards([]string{dir})
		if err != nil {
			assert.True(t, strings.HasPrefix(err.Error(), "merge: "+dir), err.Error())
			assert.NotContains(t, err.Error(), "\n")
			return
		}
		for _, r := range results {
			assert.NotEmpty(t, r.Trace)
			assert.NotEmpty(t, r.Strategy.Spec)
		}
	})
}
