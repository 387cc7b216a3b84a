package signing

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/ordergate/ordergate/secret"
)

// EncryptionKeyBytes is the length of the key signing secrets are sealed
// under (AES-256).
const EncryptionKeyBytes = 32

// ErrOpen: a sealed secret did not open: it was sealed under another key,
// for another API key, or was changed.
var ErrOpen = errors.New("signing: the sealed secret does not open with this encryption key")

// Sealer encrypts signing secrets for storage with AES-256-GCM under one
// encryption key (SIGNING_KEY_ENCRYPTION_KEY), so a copy of the database
// alone does not give them away. A sealed secret is a fresh 12-byte nonce
// followed by the ciphertext and its 16-byte tag; the API key's id is the
// additional data, so a sealed secret moved to another key's row does not
// open.
type Sealer struct {
	aead cipher.AEAD
}

// NewSealer seals under key, EncryptionKeyBytes long.
func NewSealer(key []byte) (*Sealer, error) {
	if len(key) != EncryptionKeyBytes {
		return nil, fmt.Errorf("signing: an encryption key of %d bytes, want %d", len(key), EncryptionKeyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return &Sealer{aead: aead}, nil
}

// ParseEncryptionKey reads an encryption key written as 64 hex digits or
// as standard base64 (what openssl rand -base64 32 prints).
func ParseEncryptionKey(text string) ([]byte, error) {
	if key, err := hex.DecodeString(text); err == nil && len(key) == EncryptionKeyBytes {
		return key, nil
	}
	if key, err := base64.StdEncoding.DecodeString(text); err == nil && len(key) == EncryptionKeyBytes {
		return key, nil
	}
	return nil, fmt.Errorf("signing: want %d bytes as %d hex digits or in base64", EncryptionKeyBytes, 2*EncryptionKeyBytes)
}

// ParseSealer is the Sealer under an encryption key written as
// ParseEncryptionKey reads it (SIGNING_KEY_ENCRYPTION_KEY).
func ParseSealer(text string) (*Sealer, error) {
	key, err := ParseEncryptionKey(text)
	if err != nil {
		return nil, err
	}
	return NewSealer(key)
}

// Seal encrypts the signing secret of the API key with the id keyID.
func (s *Sealer) Seal(plain secret.Text, keyID string) ([]byte, error) {
	text := plain.Reveal()
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(text)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("signing: seal: %w", err)
	}
	return s.aead.Seal(nonce, nonce, []byte(text), []byte(keyID)), nil
}

// Open decrypts what Seal made for the API key with the id keyID.
func (s *Sealer) Open(sealed []byte, keyID string) (secret.Text, error) {
	size := s.aead.NonceSize()
	if len(sealed) < size+s.aead.Overhead() {
		return secret.Text{}, ErrOpen
	}
	plain, err := s.aead.Open(nil, sealed[:size], sealed[size:], []byte(keyID))
	if err != nil {
		return secret.Text{}, ErrOpen
	}
	return secret.New(string(plain)), nil
}
