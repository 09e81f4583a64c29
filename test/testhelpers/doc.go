// Package testhelpers holds what the tests under test/ need over and over that is not starting a
// process (test/framework does that): waiting for a condition with a deadline, the clientsets of a
// rest.Config, and the EncryptionConfigurations certapi is run with. Keys, CAs and certificate requests
// come from pkg/signer/signertest, which the unit tests in pkg/ share.
package testhelpers
