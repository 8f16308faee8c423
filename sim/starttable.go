package sim

// A startTable finds a range by its start address: open addressing with
// linear probing, at most half full, deletion by backward shift. O(1) a
// lookup, an insert and a delete; grows with the ranges.
type startTable struct {
	keys []uint64
	ids  []int32 // 0: empty
	n    int
}

func (t *startTable) home(key uint64) int {
	return int((key >> 9) * 0x9e3779b97f4a7c15 >> 32 & uint64(len(t.ids)-1))
}

// get returns the range that starts at key, 0 if none.
func (t *startTable) get(key uint64) int32 {
	if t.n == 0 {
		return 0
	}
	mask := len(t.ids) - 1
	for i := t.home(key); t.ids[i] != 0; i = (i + 1) & mask {
		if t.keys[i] == key {
			return t.ids[i]
		}
	}
	return 0
}

// put notes range id at key, which no range holds.
func (t *startTable) put(key uint64, id int32) {
	if 2*(t.n+1) > len(t.ids) {
		old, oldIDs := t.keys, t.ids
		size := max(64, 2*len(oldIDs))
		t.keys, t.ids, t.n = make([]uint64, size), make([]int32, size), 0
		for i, k := range old {
			if oldIDs[i] != 0 {
				t.put(k, oldIDs[i])
			}
		}
	}
	mask := len(t.ids) - 1
	i := t.home(key)
	for t.ids[i] != 0 {
		i = (i + 1) & mask
	}
	t.keys[i], t.ids[i] = key, id
	t.n++
}

// del drops range id at key.
func (t *startTable) del(key uint64, id int32) {
	if t.n == 0 {
		return
	}
	mask := len(t.ids) - 1
	i := t.home(key)
	for t.ids[i] != id || t.keys[i] != key {
		if t.ids[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	t.n--
	for j := i; ; {
		j = (j + 1) & mask
		if t.ids[j] == 0 {
			t.ids[i] = 0
			return
		}
		k := t.home(t.keys[j])
		// An entry whose home lies cyclically in (i, j] stays.
		if i <= j && i < k && k <= j || i > j && (i < k || k <= j) {
			continue
		}
		t.keys[i], t.ids[i] = t.keys[j], t.ids[j]
		i = j
	}
}
