package explain

import (
	"fmt"
	"strings"

	"github.com/gpualloc/gpualloc"
)

// verdict sets rep's Verdict, Sentence, Suggestion and HeadroomBytes from
// its figures and its rows:
//
//   - live-bound when the device's peak of live bytes exceeds its
//     capacity: no allocator fits;
//   - fits when the run as it ran has no OOM on the device;
//   - else cache-bound when, at the moment, the cached segments and the
//     device's unreserved memory together held the request (an OOM) or
//     the cached bytes outweigh the fragmented ones (another moment), and
//     fragmentation-bound otherwise: the free memory was in pieces. The
//     suggestion is then the row that fits with the lowest peak, one of
//     the strategy the trace ran with first (a setting of PyTorch's for a
//     PyTorch run), then one of a pool, and unpooled (a device call for
//     each allocation) last.
func verdict(rep *Report) {
	rows := rep.Alternatives
	c := rep.CapacityBytes
	size := gpualloc.FormatSize
	if rep.PeakLiveBytes > c {
		rep.Verdict = LiveBound
		rep.Sentence = fmt.Sprintf("live-bound: the live bytes alone peak at %s, %s more than the device's %s, so no allocator fits",
			size(rep.PeakLiveBytes), size(rep.PeakLiveBytes-c), size(c))
		if names := topSites(rep, 2); names != "" {
			rep.Sentence += "; look at " + names
		}
		return
	}
	asRan := rows[0]
	if asRan.Fits != nil && *asRan.Fits && asRan.PeakReservedBytes != nil {
		rep.Verdict = Fits
		h := c - *asRan.PeakReservedBytes
		rep.HeadroomBytes = &h
		rep.Sentence = fmt.Sprintf("fits: the run peaks at %s reserved of the device's %s, %s of headroom",
			size(*asRan.PeakReservedBytes), size(c), size(h))
		if asRan.MinCapacityBytes != nil {
			rep.Sentence += fmt.Sprintf("; it runs on a device of %s", size(*asRan.MinCapacityBytes))
		}
		if rep.Recorded {
			rep.Sentence += "; the recorded run failed at this moment on the same device, which the replay does not: its allocator decided otherwise"
		}
		return
	}
	rep.Verdict = FragmentationBound
	if rep.Moment == MomentOOM {
		if rep.CachedBytes+max(c-rep.ReservedBytes, 0) >= rep.RequestBytes {
			rep.Verdict = CacheBound
		}
	} else if rep.CachedBytes > rep.FragmentedBytes {
		rep.Verdict = CacheBound
	}
	var what string
	switch {
	case rep.Moment == MomentOOM && rep.Verdict == CacheBound:
		what = fmt.Sprintf("the request of %s failed while %s sat in cached segments", size(rep.RequestBytes), size(rep.CachedBytes))
	case rep.Moment == MomentOOM:
		what = fmt.Sprintf("the request of %s failed with %s free in %s, the largest %s",
			size(rep.RequestBytes), size(rep.FreeBytes), pieces(rep.FreePieces), size(rep.LargestFreeBytes))
	case rep.Verdict == CacheBound:
		what = fmt.Sprintf("%s of the reserved memory is cached", size(rep.CachedBytes))
	default:
		what = fmt.Sprintf("%s of the reserved memory is free between live blocks", size(rep.FragmentedBytes))
	}
	best := -1
	for pass := 0; pass < 3 && best < 0; pass++ {
		for i, a := range rows[1:] {
			i++
			if a.Fits == nil || !*a.Fits || a.Spec == "offline" || a.PeakReservedBytes == nil {
				continue
			}
			if pass == 0 && strategyName(a.Spec) != strategyName(asRan.Spec) || pass == 1 && strategyName(a.Spec) == "unpooled" {
				continue
			}
			if best < 0 || *a.PeakReservedBytes < *rows[best].PeakReservedBytes {
				best = i
			}
		}
	}
	if best >= 0 {
		a := rows[best]
		h := c - *a.PeakReservedBytes
		rep.Suggestion, rep.HeadroomBytes = a.Suggestion, &h
		rep.Sentence = fmt.Sprintf("%s: %s; with %s the run fits, %s of headroom",
			rep.Verdict, what, a.Suggestion, size(h))
		return
	}
	rep.Sentence = fmt.Sprintf("%s: %s; no allocator tried fits", rep.Verdict, what)
	late := 0
	for _, a := range rows[1:] {
		if a.Fits == nil {
			late++
		}
	}
	if late > 0 {
		rep.Sentence += fmt.Sprintf(" (%d of the %d left out of time: give a longer time limit)", late, len(rows)-1)
	}
	if rep.OfflineBytes != nil && *rep.OfflineBytes <= c {
		rep.Sentence += fmt.Sprintf(", only the offline plan does (%s), which knows every lifetime ahead", size(*rep.OfflineBytes))
	}
}

// topSites names the first n holders of rep.
func topSites(rep *Report, n int) string {
	var names []string
	for _, h := range rep.Holders[:min(n, len(rep.Holders))] {
		names = append(names, fmt.Sprintf("%s (%s)", ShortSite(h.Site), gpualloc.FormatSize(h.Bytes)))
	}
	return strings.Join(names, " and ")
}

// pieces says n pieces.
func pieces(n int64) string {
	if n == 1 {
		return "1 piece"
	}
	return fmt.Sprintf("%d pieces", n)
}

// ShortSite shortens a site written as "file:line function" to the last
// two elements of the file's path.
func ShortSite(site string) string {
	sp := strings.IndexByte(site, ' ')
	if sp < 0 || strings.HasPrefix(site, "(") {
		return site
	}
	file := site[:sp]
	parts := strings.Split(file, "/")
	if len(parts) <= 2 {
		return site
	}
	return strings.Join(parts[len(parts)-2:], "/") + site[sp:]
}

// strategyName returns the name of the strategy of a spec, up to its colon.
func strategyName(spec string) string {
	name, _, _ := strings.Cut(spec, ":")
	return name
}
