package traces

import (
	"bytes"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpualloc/gpualloc"
)

// TestEventSize checks that the category costs an Event no memory: it sits
// in the padding after Op.
func TestEventSize(t *testing.T) {
	assert.Equal(t, uintptr(48), unsafe.Sizeof(Event{}))
	assert.Equal(t, uintptr(1), unsafe.Offsetof(Event{}.Category))
}

func TestReadCategoryFile(t *testing.T) {
	r, err := openCSV("testdata/categories.csv", Options{})
	require.NoError(t, err)
	evs, err := scanAll(t, r)
	require.NoError(t, err)
	assert.Equal(t, []Column{ColOp, ColID, ColSize, ColTime, ColCategory}, r.Columns())
	cats := map[uint64]gpualloc.Category{}
	for _, ev := range evs {
		if ev.Op == OpAlloc {
			cats[ev.ID] = ev.Category
		}
	}
	assert.Equal(t, map[uint64]gpualloc.Category{
		1: gpualloc.CategoryParameter,
		2: gpualloc.CategoryOptimizerState,
		3: gpualloc.CategoryInput,
		4: gpualloc.CategoryActivation,
		5: gpualloc.CategoryTemporary,
		6: gpualloc.CategoryAutogradDetail,
		7: gpualloc.CategoryGradient,
		8: gpualloc.CategoryUnknown,
		9: gpualloc.CategoryUnknown,
	}, cats)
	require.True(t, fastSlow(t, "categories.csv", []byte(mustRead(t, "testdata/categories.csv")), Options{}))
	assert.Equal(t, evs, roundTrip(t, evs, r.Columns()))
}

func TestReadCategories(t *testing.T) {
	const h = "op,id,size,category\n"
	for _, tc := range []struct {
		in   string
		want []gpualloc.Category // of each event
	}{
		{h + "alloc,1,5,parameter\nfree,1,,\n", []gpualloc.Category{gpualloc.CategoryParameter, gpualloc.CategoryParameter}},
		{h + "alloc,1,5,parameter\nfree,1,,parameter\n", []gpualloc.Category{gpualloc.CategoryParameter, gpualloc.CategoryParameter}},
		{h + "alloc,1,5,\nfree,1,,unknown\n", []gpualloc.Category{gpualloc.CategoryUnknown, gpualloc.CategoryUnknown}},
		{h + "alloc,1,5,Optimizer_State\nfree,1,, OPTIMIZER_STATE \n", []gpualloc.Category{gpualloc.CategoryOptimizerState, gpualloc.CategoryOptimizerState}},
		{h + "alloc,1,5, activation\r\nalloc,2,5,gradient\r\n", []gpualloc.Category{gpualloc.CategoryActivation, gpualloc.CategoryGradient}},
		{"category,op,id,size\ntemporary,alloc,1,5\n,free,1,\n", []gpualloc.Category{gpualloc.CategoryTemporary, gpualloc.CategoryTemporary}},
		// Without the column, every event is unknown, the free too.
		{"op,id,size\nalloc,1,5\nfree,1,\n", []gpualloc.Category{gpualloc.CategoryUnknown, gpualloc.CategoryUnknown}},
		// An id used again takes its new allocation's category.
		{h + "alloc,1,5,input\nfree,1,,\nalloc,1,5,autograd_detail\nfree,1,,\n", []gpualloc.Category{
			gpualloc.CategoryInput, gpualloc.CategoryInput, gpualloc.CategoryAutogradDetail, gpualloc.CategoryAutogradDetail}},
	} {
		evs, _, err := readAll(t, tc.in, Options{})
		require.NoError(t, err, tc.in)
		var got []gpualloc.Category
		for _, ev := range evs {
			got = append(got, ev.Category)
		}
		assert.Equal(t, tc.want, got, "%q", tc.in)
		assert.True(t, fastSlow(t, "t.csv", []byte(tc.in), Options{}))
	}
}

func TestReadCategoryErrors(t *testing.T) {
	const h = "op,id,size,category\n"
	for _, tc := range []struct{ in, err string }{
		{h + "alloc,1,5,weights\n", `t.csv:2: unknown category "weights" (known: parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail, unknown)`},
		{h + "alloc,1,5,parameter\nalloc,2,5,param\n", `t.csv:3: unknown category "param" (known: parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail, unknown)`},
		{h + "alloc,1,5,optimizer-state\n", `t.csv:2: unknown category "optimizer-state" (known: parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail, unknown)`},
		{h + "alloc,1,5,parameter\nfree,1,,gradient\n", `t.csv:3: free of id 1 with category gradient, allocated with category parameter`},
		{h + "alloc,1,5,\nfree,1,,unknown\nalloc,2,5,\nfree,2,,input\n", `t.csv:5: free of id 2 with category input, allocated with category unknown`},
		{"op,id,category,category\n", `t.csv:1: column "category" appears twice in header`},
	} {
		_, _, err := readAll(t, tc.in, Options{})
		assert.EqualError(t, err, tc.err, "%q", tc.in)
		fastSlow(t, "t.csv", []byte(tc.in), Options{})
		fastSlow(t, "t.csv", []byte(tc.in), Options{Lenient: true})
	}
	checkBadLine(t, "op,id,size,category\nalloc,1,5,parameter\nalloc,2,5,bogus\nfree,1,,\n",
		`unknown category "bogus" (known: parameter, optimizer_state, input, activation, gradient, temporary, autograd_detail, unknown)`, 2)
	checkBadLine(t, "op,id,size,category\nalloc,1,5,parameter\nfree,1,,input\nfree,1,,\n",
		`free of id 1 with category input, allocated with category parameter`, 2)
}

func TestWriteCategories(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, ColOp, ColID, ColSize, ColCategory)
	require.NoError(t, w.Write(Event{Op: OpAlloc, ID: 1, Size: 5, Category: gpualloc.CategoryOptimizerState}))
	require.NoError(t, w.Write(Event{Op: OpAlloc, ID: 2, Size: 5}))
	assert.EqualError(t, w.Write(Event{Op: OpAlloc, ID: 3, Size: 5, Category: gpualloc.NumCategories}),
		"traces: write of an event of id 3 with bad category 8")
	require.NoError(t, w.Write(Event{Op: OpFree, ID: 1, Size: 5, Category: gpualloc.CategoryOptimizerState}))
	require.NoError(t, w.Close())
	assert.Equal(t, "# gpualloc trace v1\nop,id,size,category\nalloc,1,5,optimizer_state\nalloc,2,5,unknown\nfree,1,,\n", b.String())

	// A writer without the column drops the categories.
	b.Reset()
	w = NewWriter(&b, ColOp, ColID, ColSize)
	require.NoError(t, w.Write(Event{Op: OpAlloc, ID: 1, Size: 5, Category: gpualloc.CategoryParameter}))
	require.NoError(t, w.Close())
	assert.Equal(t, "# gpualloc trace v1\nop,id,size\nalloc,1,5\n", b.String())

	// The default columns are every column but category.
	assert.NotContains(t, NewWriter(&b).Columns(), ColCategory)
}
