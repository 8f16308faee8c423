package snapshot

// ReadOgrek is the decoder that Read used before it streamed, kept for
// comparing the two.
var ReadOgrek = readOgrek
