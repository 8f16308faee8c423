package explain

import (
	"context"
	"testing"
	"time"
)

// BenchmarkExplainShared explains the largest of the shared real
// snapshots, read once beforehand: "moment" is the moment, its breakdown
// and its holders alone (a time limit of 1 ns leaves every row of what
// would have fit out of time), "all" the whole of Explain within its
// default time limit, with the rows it left out of time.
//
//	go test ./explain -run '^$' -bench ExplainShared -benchtime 5x
func BenchmarkExplainShared(b *testing.B) {
	for _, name := range []string{"npu_two_devices.pickle", "inference_2024.pickle", "compile_usermeta.pickle"} {
		b.Run(name, func(b *testing.B) {
			tr := sharedSnapshot(b, name)
			entries := 0
			for d := range tr.Snapshot.NumTraces() {
				entries += tr.Snapshot.Trace(d).Len()
			}
			for _, c := range []struct {
				name  string
				limit time.Duration
			}{{"moment", time.Nanosecond}, {"all", 0}} {
				b.Run(c.name, func(b *testing.B) {
					var outOfTime int
					for b.Loop() {
						reps, err := Explain(context.Background(), tr, Options{TimeLimit: c.limit})
						if err != nil {
							b.Fatal(err)
						}
						outOfTime = 0
						for _, r := range reps {
							for _, a := range r.Alternatives {
								if a.TimedOut {
									outOfTime++
								}
							}
						}
					}
					b.ReportMetric(float64(entries), "entries")
					b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/op")
					if c.limit == 0 {
						b.ReportMetric(float64(outOfTime), "rows-out-of-time")
					}
				})
			}
		})
	}
}
