package sim

import (
	"encoding/json"
	"fmt"
)

// seriesJSON is the form of a Series in JSON: everything it holds, so
// that a series read back is the series written.
type seriesJSON struct {
	Cap    int     `json:"cap"`
	Width  int64   `json:"width"`
	Fill   int64   `json:"fill"`
	Points []Point `json:"points"`
}

// MarshalJSON writes the series whole: its bound, its buckets and how far
// the last one is filled, for a replay's result to be saved and read back
// (the shards of a sweep, merged into one report).
func (s *Series) MarshalJSON() ([]byte, error) {
	return json.Marshal(seriesJSON{Cap: cap(s.buckets), Width: s.width, Fill: s.fill, Points: s.buckets})
}

// UnmarshalJSON reads a series that MarshalJSON wrote.
func (s *Series) UnmarshalJSON(data []byte) error {
	var j seriesJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	if j.Cap < len(j.Points) || j.Width < 1 || j.Fill < 0 || j.Fill > j.Width {
		return fmt.Errorf("sim: bad series: %d of at most %d buckets, %d events each, the last holding %d", len(j.Points), j.Cap, j.Width, j.Fill)
	}
	s.buckets = append(make([]Point, 0, j.Cap), j.Points...)
	s.width, s.fill = j.Width, j.Fill
	return nil
}
