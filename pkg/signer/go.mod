// certapi's CA and leaf signing: the standard library only. A module of its own so that operators reach it
// through pkg/servingcert and pkg/servingcert/servingcerttest without certapi's server dependencies
// (docs/development.md, "Modules").
module github.com/certapi/certapi/pkg/signer

go 1.25.0
