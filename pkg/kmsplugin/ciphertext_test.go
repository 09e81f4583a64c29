package kmsplugin

import (
	"bytes"
	"strings"
	"testing"
)

func TestSealedFraming(t *testing.T) {
	iv := bytes.Repeat([]byte{7}, GCMIVSize)
	body := bytes.Repeat([]byte{9}, GCMTagSize+32)
	framed := append(append([]byte{1, GCMIVSize}, iv...), body...)

	got, err := Sealed{IV: iv, Ciphertext: body}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, framed) {
		t.Fatalf("Marshal() = %x, want %x", got, framed)
	}

	for _, tc := range []struct {
		name   string
		data   []byte
		errHas string // empty: parses to iv and body
	}{
		{"framed", framed, ""},
		{"a token's own 16-byte IV", append(append([]byte{1, 16}, bytes.Repeat([]byte{3}, 16)...), body...), ""},
		{"empty", nil, "too short for its header"},
		{"header only", []byte{1}, "too short for its header"},
		{"another version", append([]byte{2}, framed[1:]...), "format version 2"},
		{"zero IV length", append([]byte{1, 0}, body...), "IV of 0 bytes"},
		{"IV length too large", append([]byte{1, 200}, body...), "IV of 200 bytes"},
		{"no tag", append([]byte{1, GCMIVSize}, iv...), "too short"},
		{"tag cut short", framed[:2+GCMIVSize+GCMTagSize-1], "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSealed(tc.data)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("ParseSealed() = %+v, %v; want an error saying %q", s, err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			back, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, tc.data) {
				t.Fatalf("ParseSealed then Marshal = %x, want %x", back, tc.data)
			}
		})
	}
}

func TestSealedMarshalRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      Sealed
		errHas string
	}{
		{"no IV", Sealed{Ciphertext: make([]byte, GCMTagSize)}, "IV of 0 bytes"},
		{"IV too long", Sealed{IV: make([]byte, 65), Ciphertext: make([]byte, GCMTagSize)}, "IV of 65 bytes"},
		{"shorter than a tag", Sealed{IV: make([]byte, GCMIVSize), Ciphertext: make([]byte, GCMTagSize-1)}, "shorter than the GCM tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.s.Marshal(); err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("Marshal() = %v, want an error saying %q", err, tc.errHas)
			}
		})
	}
}
