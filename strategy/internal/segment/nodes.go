package segment

// NewNode returns the index of a zero node of *nodes, whose elements refer
// to each other by index: the index most recently given back to spare by
// [RecycleNode], else that of a zero node appended to *nodes, which may
// then be replaced. So a strategy's nodes stop allocating once they have
// grown to its peak.
func NewNode(nodes *[]Node, spare *[]int32) int32 {
	if k := len(*spare); k > 0 {
		n := (*spare)[k-1]
		*spare = (*spare)[:k-1]
		return n
	}
	*nodes = append(*nodes, Node{})
	return int32(len(*nodes) - 1)
}

// RecycleNode zeroes node n, no longer used, and gives its index back to
// spare for [NewNode].
func RecycleNode(nodes []Node, spare *[]int32, n int32) {
	nodes[n] = Node{}
	*spare = append(*spare, n)
}
