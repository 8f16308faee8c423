package diff

import (
	"cmp"
	"slices"
	"strings"

	"github.com/gpualloc/gpualloc/explain"
)

// A Summary summarises a device of the runs of the ranks of one job. Its
// JSON names are those of simulate diff -f json given more than two
// traces.
type Summary struct {
	Device int    `json:"device"`
	Ranks  []Rank `json:"ranks"`
	// PeakRank is the trace whose peak of reserved bytes is the largest
	// (the first of them), PeakOverMedianBytes its peak less the median
	// of the ranks' peaks, MedianPeakReservedBytes.
	PeakRank                string `json:"peak_rank"`
	MedianPeakReservedBytes int64  `json:"median_peak_reserved_bytes"`
	PeakOverMedianBytes     int64  `json:"peak_over_median_bytes"`
	// Divergent is the rank that diverges (see Divergent), "" for none;
	// DivergentBytes its peak less the median; DivergentSite the site
	// whose bytes in that rank lie farthest from the site's median.
	Divergent      string `json:"divergent"`
	DivergentBytes int64  `json:"divergent_delta_bytes"`
	DivergentSite  string `json:"divergent_site"`
	// By is the grouping of Sites: each group of any rank, with its
	// smallest, median and largest live bytes at the ranks' peaks (0 for
	// a rank that has none), the widest spread first.
	By    explain.By `json:"by"`
	Sites []RankSite `json:"sites"`
}

// A Rank is the figures of one rank's device.
type Rank struct {
	Trace             string `json:"trace"`
	Device            int    `json:"device"`
	PeakReservedBytes int64  `json:"peak_reserved_bytes"`
	PeakLiveBytes     int64  `json:"peak_live_bytes"`
	LiveBytes         int64  `json:"live_bytes"`
}

// A RankSite is a group of live bytes over the ranks at their peaks.
type RankSite struct {
	Site        string `json:"site"`
	MinBytes    int64  `json:"min_bytes"`
	MedianBytes int64  `json:"median_bytes"`
	MaxBytes    int64  `json:"max_bytes"`
	MinRank     string `json:"min_rank"`
	MaxRank     string `json:"max_rank"`
}

// Divergent returns the index of the rank that diverges from the others
// by its peak of reserved bytes, -1 for none. With m the median of the
// peaks and s the median of the peaks' distances from m (the median
// absolute deviation), the rank farthest from m (the first of them)
// diverges when its distance exceeds both 3s and 5% of m, and there are
// at least three ranks: one rank off the others, when the rest agree.
func Divergent(peaks []int64) int {
	if len(peaks) < 3 {
		return -1
	}
	m := median(peaks)
	dist := make([]int64, len(peaks))
	far := 0
	for i, p := range peaks {
		dist[i] = abs(p - m)
		if dist[i] > dist[far] {
			far = i
		}
	}
	s := median(dist)
	if dist[far] > 3*s && dist[far] > m/20 {
		return far
	}
	return -1
}

// median returns the median of v: the mean of the two middle values of
// an even number, rounded down.
func median(v []int64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	a, b := s[n/2-1], s[n/2]
	return a + (b-a)/2
}

// Summarise summarises the devices of runs, the ranks of one job, matched
// as MatchDevices matches them.
func Summarise(runs []*Run) ([]Summary, error) {
	groups, err := MatchDevices(runs)
	if err != nil {
		return nil, err
	}
	var out []Summary
	for _, g := range groups {
		devs := make([]*Device, len(runs))
		for k, r := range runs {
			devs[k] = &r.Devices[g[k]]
		}
		out = append(out, summarise(runs, devs))
	}
	return out, nil
}

// summarise summarises devs, the device of each of runs.
func summarise(runs []*Run, devs []*Device) Summary {
	s := Summary{Device: devs[0].Device, By: devs[0].By, Ranks: []Rank{}, Sites: []RankSite{}}
	peaks := make([]int64, len(devs))
	top := 0
	for k, d := range devs {
		s.Ranks = append(s.Ranks, Rank{Trace: runs[k].Trace, Device: d.Device, PeakReservedBytes: d.PeakReservedBytes,
			PeakLiveBytes: d.PeakLiveBytes, LiveBytes: d.LiveBytes})
		peaks[k] = d.PeakReservedBytes
		if peaks[k] > peaks[top] {
			top = k
		}
		if d.By != s.By {
			s.By = "" // groupings differ (one rank has no stacks): no site table
		}
	}
	s.PeakRank = runs[top].Trace
	s.MedianPeakReservedBytes = median(peaks)
	s.PeakOverMedianBytes = peaks[top] - s.MedianPeakReservedBytes
	// Each site's bytes by rank.
	bytes := map[string][]int64{}
	if s.By != "" {
		for k, d := range devs {
			for _, site := range d.Sites {
				v, ok := bytes[site.Site]
				if !ok {
					v = make([]int64, len(devs))
					bytes[site.Site] = v
				}
				v[k] += site.Bytes
			}
		}
	}
	medians := map[string]int64{}
	for site, v := range bytes {
		lo, hi := 0, 0
		for k := range v {
			if v[k] < v[lo] {
				lo = k
			}
			if v[k] > v[hi] {
				hi = k
			}
		}
		medians[site] = median(v)
		s.Sites = append(s.Sites, RankSite{Site: site, MinBytes: v[lo], MedianBytes: medians[site], MaxBytes: v[hi],
			MinRank: runs[lo].Trace, MaxRank: runs[hi].Trace})
	}
	slices.SortFunc(s.Sites, func(a, b RankSite) int {
		if c := cmp.Compare(b.MaxBytes-b.MinBytes, a.MaxBytes-a.MinBytes); c != 0 {
			return c
		}
		if c := cmp.Compare(b.MaxBytes, a.MaxBytes); c != 0 {
			return c
		}
		return strings.Compare(a.Site, b.Site)
	})
	if k := Divergent(peaks); k >= 0 {
		s.Divergent = runs[k].Trace
		s.DivergentBytes = peaks[k] - s.MedianPeakReservedBytes
		var far int64 = -1
		for _, site := range s.Sites { // in a fixed order: the first of equals
			if d := abs(bytes[site.Site][k] - medians[site.Site]); d > far && d > 0 {
				far, s.DivergentSite = d, site.Site
			}
		}
	}
	return s
}
