// Package testhelpers holds what the tests under test/ need over and over that is not starting a
// process (test/framework does that): waiting for a condition with a deadline, the clientsets of a
// rest.Config, the EncryptionConfigurations certapi is run with, and what the tests of the served
// certificate check stand up (webhooks.go: TLS servers on this machine's address, certificates from
// certapi or another CA, selector-less Services with their EndpointSlices, opted-in webhook
// configurations), which hack/load's --served phase shares. Keys, CAs and certificate requests come from
// pkg/signer/signertest, which the unit tests in pkg/ share.
package testhelpers
