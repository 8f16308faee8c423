package sim

import (
	"encoding/json"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc/traces"
)

func TestSeriesKeepsPeaks(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 1 + rng.IntN(5000)
		tr := randomTrace(rng, n, traceShape{maxSize: 64 << 10, maxLive: 41, devices: 3, streams: 2})
		if seed%2 == 1 { // timestamps are optional
			for i := range tr.events {
				tr.events[i].TimeUS = traces.NoTime
			}
		}
		cfg := Config{Open: openCache, Capacity: 512 << 10, Verify: true}

		cfg.SeriesBuckets = len(tr.events) + 2
		full, err := Replay(tr.reader(), cfg)
		require.NoError(t, err)
		require.Equal(t, int64(1), full.Series.Width())
		require.Equal(t, len(tr.events), full.Series.Len())

		for _, buckets := range []int{2, 7, 16, 2048} {
			cfg.SeriesBuckets = buckets
			res, err := Replay(tr.reader(), cfg)
			require.NoError(t, err)
			s := res.Series
			assert.LessOrEqual(t, s.Len(), buckets, "seed %d", seed)
			assert.Equal(t, buckets&^1, s.Cap())
			assert.Equal(t, 1, bits.OnesCount64(uint64(s.Width())))

			req, alloc, resv := s.Peaks()
			assert.Equal(t, res.PeakRequestedBytes, req, "seed %d, %d buckets", seed, buckets)
			assert.Equal(t, res.PeakAllocatedBytes, alloc, "seed %d, %d buckets", seed, buckets)
			assert.Equal(t, res.PeakReservedBytes, resv, "seed %d, %d buckets", seed, buckets)
			assert.Equal(t, full.PeakReservedBytes, res.PeakReservedBytes)

			checkSeries(t, s, full.Series, res.Events)
		}
	}
}

// checkSeries checks that s covers events 0..events-1 in order, and that
// each bucket summarizes exactly the one-event buckets of full it covers.
func checkSeries(t *testing.T, s, full *Series, events int64) {
	t.Helper()
	fp := full.Points()
	next := int64(0)
	for i, p := range s.All() {
		require.Equal(t, next, p.First, "bucket %d", i)
		require.LessOrEqual(t, p.First, p.Last)
		if i < s.Len()-1 {
			require.Equal(t, s.Width(), p.Last-p.First+1, "bucket %d is full", i)
		}
		next = p.Last + 1
		span := fp[p.First : p.Last+1]
		assert.Equal(t, span[0].FirstTimeUS, p.FirstTimeUS)
		assert.Equal(t, span[len(span)-1].LastTimeUS, p.LastTimeUS)
		for _, q := range []struct {
			name string
			get  func(Point) Range
		}{
			{"requested", func(p Point) Range { return p.Requested }},
			{"allocated", func(p Point) Range { return p.Allocated }},
			{"reserved", func(p Point) Range { return p.Reserved }},
		} {
			want := q.get(span[0])
			for _, f := range span[1:] {
				want = want.join(q.get(f))
			}
			got := q.get(p)
			assert.Equal(t, want, got, "bucket %d, %s", i, q.name)
			assert.GreaterOrEqual(t, got.MaxEvent, p.First)
			assert.LessOrEqual(t, got.MaxEvent, p.Last)
		}
	}
	assert.Equal(t, events, next, "the series covers every event")
}

func TestSeriesDecimation(t *testing.T) {
	s := newSeries(4)
	for i := range int64(9) {
		v := (i * 37) % 11 // 0 4 8 1 5 9 2 6 10
		s.add(i, 100+i, v, 2*v, v-1, v+1, v)
	}
	assert.Equal(t, int64(4), s.Width())
	assert.Equal(t, []Point{
		{
			First: 0, Last: 3, FirstTimeUS: 100, LastTimeUS: 103,
			Requested: Range{Min: 0, Max: 8, End: 1, MaxEvent: 2, MaxTimeUS: 102},
			Allocated: Range{Min: 0, Max: 16, End: 2, MaxEvent: 2, MaxTimeUS: 102},
			Reserved:  Range{Min: -1, Max: 9, End: 1, MaxEvent: 2, MaxTimeUS: 102},
		},
		{
			First: 4, Last: 7, FirstTimeUS: 104, LastTimeUS: 107,
			Requested: Range{Min: 2, Max: 9, End: 6, MaxEvent: 5, MaxTimeUS: 105},
			Allocated: Range{Min: 4, Max: 18, End: 12, MaxEvent: 5, MaxTimeUS: 105},
			Reserved:  Range{Min: 1, Max: 10, End: 6, MaxEvent: 5, MaxTimeUS: 105},
		},
		{
			First: 8, Last: 8, FirstTimeUS: 108, LastTimeUS: 108,
			Requested: Range{Min: 10, Max: 10, End: 10, MaxEvent: 8, MaxTimeUS: 108},
			Allocated: Range{Min: 20, Max: 20, End: 20, MaxEvent: 8, MaxTimeUS: 108},
			Reserved:  Range{Min: 9, Max: 11, End: 10, MaxEvent: 8, MaxTimeUS: 108},
		},
	}, s.Points())
}

func TestSeriesTieKeepsFirstPeak(t *testing.T) {
	s := newSeries(2)
	for i := range int64(8) {
		s.add(i, i, 5, 5, 5, 5, 5)
	}
	s.add(8, 8, 5, 5, 5, 5, 5)
	require.Equal(t, 2, s.Len())
	p := s.Points()
	assert.Equal(t, int64(0), p[0].Requested.MaxEvent)
	assert.Equal(t, int64(7), p[0].Last)
	assert.Equal(t, int64(8), p[1].Requested.MaxEvent)
}

func TestSeriesNil(t *testing.T) {
	res, err := Replay(smallTrace().reader(), Config{Open: openExact, SeriesBuckets: -1})
	require.NoError(t, err)
	assert.Nil(t, res.Series)
	assert.Zero(t, res.Series.Len())
	assert.Zero(t, res.Series.Cap())
	assert.Nil(t, res.Series.Points())
	for range res.Series.All() {
		t.Fatal("points in a nil series")
	}
}

// TestDecimate checks that merging buckets keeps every peak.
func TestDecimate(t *testing.T) {
	var pts []Point
	for i := range int64(1000) {
		v := (i * 7919) % 1013 // a jagged course
		if i == 617 {
			v = 5000 // the peak
		}
		r := Range{Min: v, Max: v, End: v, MaxEvent: i, MaxTimeUS: 10 * i}
		pts = append(pts, Point{First: i, Last: i, FirstTimeUS: 10 * i, LastTimeUS: 10 * i, Requested: r, Allocated: r, Reserved: r})
	}
	for _, n := range []int{1, 7, 100, 333, 999} {
		d := Decimate(pts, n)
		require.LessOrEqual(t, len(d), n, "n=%d", n)
		assert.Equal(t, int64(0), d[0].First)
		assert.Equal(t, int64(999), d[len(d)-1].Last)
		var peak Range
		lo := int64(1 << 62)
		for i, p := range d {
			if i > 0 {
				assert.Equal(t, d[i-1].Last+1, p.First, "n=%d: buckets follow each other", n)
			}
			if p.Reserved.Max > peak.Max {
				peak = p.Reserved
			}
			lo = min(lo, p.Reserved.Min)
		}
		assert.Equal(t, int64(5000), peak.Max, "n=%d", n)
		assert.Equal(t, int64(617), peak.MaxEvent, "n=%d", n)
		assert.Equal(t, int64(6170), peak.MaxTimeUS, "n=%d", n)
		assert.Equal(t, int64(0), lo, "n=%d: minima kept too", n)
	}
	assert.Len(t, Decimate(pts, 0), 1000, "n < 1: unchanged")
	assert.Len(t, Decimate(pts, 5000), 1000)
}

func TestSeriesJSONRoundTrip(t *testing.T) {
	s := newSeries(8)
	for i := range int64(21) {
		s.add(i, 10*i, i, 2*i, i, 3*i, 2*i)
	}
	data, err := json.Marshal(s)
	require.NoError(t, err)
	var back Series
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, s, &back)
	assert.Equal(t, s.Cap(), back.Cap())

	for _, bad := range []string{`{"cap":1,"width":1,"fill":1,"points":[{},{}]}`, `{"cap":2,"width":0}`, `{"cap":2,"width":2,"fill":3}`} {
		assert.Error(t, json.Unmarshal([]byte(bad), &back), bad)
	}
}
