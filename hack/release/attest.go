package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/certapi/certapi/hack/internal/buildsource"
)

// What cosign reads: its signature and attestation layers and annotations (sigstore/cosign pkg/oci/static,
// pkg/types) and the "kind" annotations of a layout written by `cosign save` (pkg/oci/layout), through which
// `cosign verify --local-image` finds the signed index, its signatures and its attestations.
const (
	simpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	dsseMediaType          = "application/vnd.dsse.envelope.v1+json"
	cosignSignatureAnno    = "dev.cosignproject.cosign/signature"
	cosignKindAnno         = "kind"
	cosignKindImageIndex   = "dev.cosignproject.cosign/imageIndex"
	cosignKindImage        = "dev.cosignproject.cosign/image"
	cosignKindSigs         = "dev.cosignproject.cosign/sigs"
	cosignKindAtts         = "dev.cosignproject.cosign/atts"

	inTotoPayloadType   = "application/vnd.in-toto+json"
	slsaProvenanceV1    = "https://slsa.dev/provenance/v1"
	spdxPredicateType   = "https://spdx.dev/Document"
	provenanceBuildType = repoURL + "/blob/main/docs/release.md#make-release"
	provenanceBuilderID = repoURL + "/hack/release"
	predicateTypeAnno   = "predicateType"
)

// ImageSignaturesArchive and ProvenanceFile are the names of the image index's signatures and attestations
// (an OCI layout in cosign's format, to unpack over the image's) and of the release files' provenance (a
// DSSE envelope, what `cosign verify-blob-attestation --signature` reads).
const (
	ImageSignaturesArchive = "certapi-image.sig.oci.tar"
	ProvenanceFile         = "provenance.intoto.json"
)

// simpleSigning is cosign's signature payload for an image ("cosign container image signature", Red Hat's
// simple signing format): the digest it signs and the repository it was signed for.
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]string `json:"optional"`
}

// signatureImage is cosign's signature manifest of digest: one simple-signing layer annotated with its
// signature, as `cosign sign` pushes it to the tag sha256-HEX.sig.
func (k *keys) signatureImage(digest v1.Hash) (v1.Image, error) {
	var p simpleSigning
	p.Critical.Identity.DockerReference = imageRepository
	p.Critical.Image.DockerManifestDigest = digest.String()
	p.Critical.Type = "cosign container image signature"
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	sig, err := k.sign(payload)
	if err != nil {
		return nil, err
	}
	return cosignImage(mutate.Addendum{
		Layer:       static.NewLayer(payload, simpleSigningMediaType),
		Annotations: map[string]string{cosignSignatureAnno: base64.StdEncoding.EncodeToString(sig)},
	})
}

// attestationImage is cosign's attestation manifest: one DSSE envelope layer per statement, each annotated
// with its predicate type, as `cosign attest` pushes it to the tag sha256-HEX.att.
func (k *keys) attestationImage(statements ...*intoto.Statement) (v1.Image, error) {
	var adds []mutate.Addendum
	for _, st := range statements {
		raw, err := statementJSON(st)
		if err != nil {
			return nil, err
		}
		env, err := k.dsseEnvelope(raw)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{
			Layer:       static.NewLayer(env, dsseMediaType),
			Annotations: map[string]string{cosignSignatureAnno: "", predicateTypeAnno: st.GetPredicateType()},
		})
	}
	return cosignImage(adds...)
}

// cosignImage is an OCI image of an empty config and the layers given, as cosign's signatures and
// attestations are.
func cosignImage(adds ...mutate.Addendum) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(img, adds...)
}

// writeImageSignatures writes the archive of the image index's signature and attestations (SLSA provenance
// and the SPDX SBOM): an OCI layout as `cosign save` writes one, whose index.json lists the image index (by
// descriptor only: its blobs are in the image's archive), its signatures and its attestations. Unpacked over
// the image's layout, it makes one that `cosign verify --local-image` and `cosign verify-attestation
// --local-image` check. It is not in the image's archive because `ctr images import` would unpack the
// signature manifests as images and fail.
func (k *keys) writeImageSignatures(o options, src source, index v1.Descriptor, sbom []byte) error {
	dir, err := os.MkdirTemp(o.work, "oci-sig-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	d := index
	d.Annotations = map[string]string{}
	for k, v := range index.Annotations {
		d.Annotations[k] = v
	}
	d.Annotations[cosignKindAnno] = cosignKindImageIndex
	if err := p.AppendDescriptor(d); err != nil {
		return err
	}
	sigs, err := k.signatureImage(index.Digest)
	if err != nil {
		return fmt.Errorf("signing the image index: %w", err)
	}
	if err := p.AppendImage(sigs, layout.WithAnnotations(map[string]string{cosignKindAnno: cosignKindSigs})); err != nil {
		return err
	}
	subject := []*intoto.ResourceDescriptor{{Name: imageRepository, Digest: map[string]string{index.Digest.Algorithm: index.Digest.Hex}}}
	prov, err := provenanceStatement(o, src, subject)
	if err != nil {
		return err
	}
	spdx, err := spdxStatement(sbom, subject)
	if err != nil {
		return err
	}
	atts, err := k.attestationImage(prov, spdx)
	if err != nil {
		return fmt.Errorf("attesting the image index: %w", err)
	}
	if err := p.AppendImage(atts, layout.WithAnnotations(map[string]string{cosignKindAnno: cosignKindAtts})); err != nil {
		return err
	}
	return buildsource.TarDir(filepath.Join(o.output, ImageSignaturesArchive), dir, src.Time)
}

// signReferrer adds the cosign signature of the SBOM's referrer manifest d to its layout p, whose index.json
// lists d marked as the image `cosign verify --local-image` checks (attachReferrer).
func (k *keys) signReferrer(p layout.Path, d v1.Descriptor) error {
	sigs, err := k.signatureImage(d.Digest)
	if err != nil {
		return err
	}
	return p.AppendImage(sigs, layout.WithAnnotations(map[string]string{cosignKindAnno: cosignKindSigs}))
}

// provenanceStatement is the SLSA v1 provenance of subject: built by hack/release from the commit, with the
// release's parameters and the Go toolchain. No timestamps and no invocation ID: a second build of the
// commit writes the same statement.
func provenanceStatement(o options, src source, subject []*intoto.ResourceDescriptor) (*intoto.Statement, error) {
	params, err := structpb.NewStruct(map[string]any{
		"version": src.Version, "imageArchitectures": o.imageArchs, "platforms": o.platforms,
		"source": "git+" + repoURL + "@" + src.Commit,
	})
	if err != nil {
		return nil, err
	}
	internal, err := structpb.NewStruct(map[string]any{"env": strings.Join(reproducibleEnv, " ")})
	if err != nil {
		return nil, err
	}
	p := &slsa.Provenance{
		BuildDefinition: &slsa.BuildDefinition{
			BuildType: provenanceBuildType, ExternalParameters: params, InternalParameters: internal,
			ResolvedDependencies: []*intoto.ResourceDescriptor{
				{Uri: "git+" + repoURL, Digest: map[string]string{"gitCommit": src.Commit}},
				{Uri: "pkg:golang/stdlib@" + strings.TrimPrefix(runtime.Version(), "go"), Name: "go"},
			},
		},
		RunDetails: &slsa.RunDetails{Builder: &slsa.Builder{Id: provenanceBuilderID}},
	}
	pred, err := protoStruct(p)
	if err != nil {
		return nil, err
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, Subject: subject, PredicateType: slsaProvenanceV1, Predicate: pred}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("the provenance statement: %w", err)
	}
	return st, nil
}

// spdxStatement is the in-toto statement of the SPDX SBOM about subject (`cosign attest --type spdxjson`).
func spdxStatement(sbom []byte, subject []*intoto.ResourceDescriptor) (*intoto.Statement, error) {
	var doc map[string]any
	if err := json.Unmarshal(sbom, &doc); err != nil {
		return nil, err
	}
	pred, err := structpb.NewStruct(doc)
	if err != nil {
		return nil, err
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, Subject: subject, PredicateType: spdxPredicateType, Predicate: pred}
	return st, st.Validate()
}

// writeFilesProvenance writes the release files' provenance: one SLSA statement whose subjects are every
// file of the release (but checksums.txt, its signature and this file, written after), signed as a DSSE
// envelope. `cosign verify-blob-attestation --type slsaprovenance1` checks a file against it.
func (k *keys) writeFilesProvenance(o options, src source) error {
	var subject []*intoto.ResourceDescriptor
	var walkErr error
	err := filepathWalkFiles(o.output, func(rel string, _ int64) {
		if walkErr != nil || rel == ChecksumsFile || rel == ChecksumsSignature || rel == ProvenanceFile {
			return
		}
		sum, err := buildsource.FileSHA256(filepath.Join(o.output, filepath.FromSlash(rel)))
		if err != nil {
			walkErr = err
			return
		}
		subject = append(subject, &intoto.ResourceDescriptor{Name: rel, Digest: map[string]string{"sha256": sum}})
	})
	if err == nil {
		err = walkErr
	}
	if err != nil {
		return err
	}
	sort.Slice(subject, func(i, j int) bool { return subject[i].Name < subject[j].Name })
	st, err := provenanceStatement(o, src, subject)
	if err != nil {
		return err
	}
	raw, err := statementJSON(st)
	if err != nil {
		return err
	}
	env, err := k.dsseEnvelope(raw)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(o.output, ProvenanceFile), append(env, '\n'), 0o644)
}

// protoStruct converts a message into a structpb.Struct through its JSON form (a statement's predicate).
func protoStruct(m proto.Message) (*structpb.Struct, error) {
	raw, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	s := &structpb.Struct{}
	return s, protojson.Unmarshal(raw, s)
}

// statementJSON is the statement's JSON with sorted keys and no random spacing: protojson's output is
// deliberately unstable between builds, and a release must be reproducible.
func statementJSON(st *intoto.Statement) ([]byte, error) {
	raw, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return jsonMarshal(v)
}

// jsonMarshal is json.Marshal without HTML escaping (a SPDX document's text stays as written).
func jsonMarshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
