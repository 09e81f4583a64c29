package kmsplugin

import (
	"errors"
	"fmt"
)

// Ciphertext framing: what Encrypt returns and Decrypt takes. kube-apiserver stores it as the encrypted
// DEK (or DEK seed) beside the key ID; it is small, a few dozen bytes.
//
//	byte 0       format version, 1
//	byte 1       IV length n (GCMIVSize for every IV this plugin makes; a token may pick its own)
//	bytes 2..    the IV (n bytes), then the AES-GCM ciphertext with its 16-byte tag appended
const (
	ciphertextVersion = 1
	// GCMIVSize is the length of the random IV this plugin gives the token for each encryption: 96
	// bits, the size GCM is defined for.
	GCMIVSize = 12
	// GCMTagSize is the length of the GCM authentication tag, in bytes (128 bits).
	GCMTagSize = 16
	// maxIVSize bounds the IV a token may report having used.
	maxIVSize = 64
)

// Sealed is one encryption's output: the IV the token used and the ciphertext with its tag.
type Sealed struct {
	IV         []byte
	Ciphertext []byte
}

// Marshal frames s as described above.
func (s Sealed) Marshal() ([]byte, error) {
	if len(s.IV) == 0 || len(s.IV) > maxIVSize {
		return nil, fmt.Errorf("IV of %d bytes: want 1 to %d", len(s.IV), maxIVSize)
	}
	if len(s.Ciphertext) < GCMTagSize {
		return nil, fmt.Errorf("ciphertext of %d bytes is shorter than the GCM tag", len(s.Ciphertext))
	}
	out := make([]byte, 0, 2+len(s.IV)+len(s.Ciphertext))
	out = append(out, ciphertextVersion, byte(len(s.IV)))
	out = append(out, s.IV...)
	return append(out, s.Ciphertext...), nil
}

// ParseSealed reverses Sealed.Marshal. The slices it returns alias data.
func ParseSealed(data []byte) (Sealed, error) {
	if len(data) < 2 {
		return Sealed{}, errors.New("ciphertext too short for its header")
	}
	if data[0] != ciphertextVersion {
		return Sealed{}, fmt.Errorf("ciphertext format version %d, want %d: not made by this plugin", data[0], ciphertextVersion)
	}
	n := int(data[1])
	if n == 0 || n > maxIVSize {
		return Sealed{}, fmt.Errorf("ciphertext names an IV of %d bytes: want 1 to %d", n, maxIVSize)
	}
	if len(data) < 2+n+GCMTagSize {
		return Sealed{}, fmt.Errorf("ciphertext of %d bytes is too short for an IV of %d bytes and a GCM tag", len(data), n)
	}
	return Sealed{IV: data[2 : 2+n], Ciphertext: data[2+n:]}, nil
}
