package plan_test

import (
	"context"
	"fmt"
	"os"

	"github.com/gpualloc/gpualloc/plan"
)

// Three buffers: a and c never live together, b lives with both. The plan
// puts c where a was, and needs the lower bound.
func ExampleSolve() {
	p := plan.Problem{Buffers: []plan.Buffer{
		{ID: "a", Lower: 0, Upper: 4, Size: 10},
		{ID: "b", Lower: 2, Upper: 6, Size: 5},
		{ID: "c", Lower: 4, Upper: 8, Size: 10},
	}}
	s, err := plan.Solve(context.Background(), p, plan.Options{})
	if err != nil {
		panic(err)
	}
	if err := plan.Check(p, s.Placements(p), 0); err != nil {
		panic(err)
	}
	fmt.Println("height", s.Height, "lower bound", s.LowerBound, "optimal", s.Optimal)
	plan.WritePlacements(os.Stdout, s.Placements(p))
	// Output:
	// height 15 lower bound 15 optimal true
	// id,lower,upper,size,offset
	// a,0,4,10,0
	// b,2,6,5,10
	// c,4,8,10,0
}
