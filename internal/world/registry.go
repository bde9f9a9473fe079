package world

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/micra-net/micra/subnet"
)

// RegistryFile is one registry file of the world, in a real format.
type RegistryFile struct {
	Name   string        // file name, e.g. "delegated-ripencc-extended-latest"
	Format subnet.Format // subnet.FormatDelegated or subnet.FormatRPSL
	Data   []byte
}

// registryFiles writes the hierarchy as the registries publish it:
//   - delegated-iana-latest: IANA's file, 127/8 (ietf) and the
//     registry-level blocks inside it, the registry in the status column;
//   - delegated-<rir>-extended-latest: each RIR's allocations and ASNs with
//     the holder's opaque-id, so one organisation's rows group together;
//   - <source>.db.inetnum and <source>.db.organisation: RPSL objects for
//     everything below the allocations (organisation subnets, customer
//     assignments, sub-assignments, unary ranges) and the organisations
//     they name.
func (w *World) registryFiles() []RegistryFile {
	files := []RegistryFile{{Name: "delegated-iana-latest", Format: subnet.FormatDelegated, Data: w.ianaFile()}}
	for _, reg := range registries {
		files = append(files, RegistryFile{Name: "delegated-" + reg + "-extended-latest", Format: subnet.FormatDelegated, Data: w.delegatedFile(reg)})
	}
	inet, orgs := w.rpslFiles()
	for _, reg := range registries {
		src := strings.ToLower(rpslSource(reg))
		files = append(files,
			RegistryFile{Name: src + ".db.organisation", Format: subnet.FormatRPSL, Data: orgs[reg]},
			RegistryFile{Name: src + ".db.inetnum", Format: subnet.FormatRPSL, Data: inet[reg]})
	}
	return files
}

func (w *World) ianaFile() []byte {
	var rows []string
	for i := range w.blocks {
		b := &w.blocks[i]
		switch b.b.kind {
		case bRoot:
			rows = append(rows, fmt.Sprintf("iana|ZZ|ipv4|%s|%d|19830101|ietf", u32addr(b.start), b.end-b.start+1))
		case bRegistry:
			rows = append(rows, fmt.Sprintf("iana|ZZ|ipv4|%s|%d|%s|%s", u32addr(b.start), b.end-b.start+1, b.b.date, b.b.registry))
		}
	}
	var buf bytes.Buffer
	buf.WriteString("#\n# IANA IPv4 address space of the micra emulated Internet (inside 127.0.0.0/8).\n#\n")
	fmt.Fprintf(&buf, "2|iana|%s|%d|19830101|%s|+0000\n", worldDate, len(rows), worldDate)
	fmt.Fprintf(&buf, "iana|*|ipv4|*|%d|summary\n", len(rows))
	for _, r := range rows {
		buf.WriteString(r)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// allocRegistry returns the registry of the allocation enclosing block i,
// or "" above the allocations.
func (w *World) allocRegistry(i int) string {
	for ; i >= 0; i = int(w.blocks[i].parent) {
		if w.blocks[i].b.kind == bAlloc {
			return w.blocks[i].b.registry
		}
	}
	return ""
}

func (w *World) delegatedFile(reg string) []byte {
	type asnRow struct {
		asn  uint32
		line string
	}
	var asns []asnRow
	seen := map[*org]bool{}
	var ipv4 []string
	for i := range w.blocks {
		b := w.blocks[i].b
		if b.kind != bAlloc || b.registry != reg {
			continue
		}
		o := b.org
		ipv4 = append(ipv4, fmt.Sprintf("%s|%s|ipv4|%s|%d|%s|%s|%s", reg, b.country, u32addr(w.blocks[i].start), w.blocks[i].end-w.blocks[i].start+1, b.date, b.status, o.opaque))
		if !seen[o] && o.asn != 0 {
			seen[o] = true
			asns = append(asns, asnRow{o.asn, fmt.Sprintf("%s|%s|asn|%d|1|%s|%s|%s", reg, o.country, o.asn, o.date, b.status, o.opaque)})
		}
	}
	slices.SortFunc(asns, func(a, b asnRow) int { return cmp.Compare(a.asn, b.asn) })
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "2.3|%s|%s|%d|19840101|%s|+0000\n", reg, worldDate, len(asns)+len(ipv4), worldDate)
	fmt.Fprintf(&buf, "%s|*|asn|*|%d|summary\n", reg, len(asns))
	fmt.Fprintf(&buf, "%s|*|ipv4|*|%d|summary\n", reg, len(ipv4))
	fmt.Fprintf(&buf, "%s|*|ipv6|*|0|summary\n", reg)
	for _, a := range asns {
		buf.WriteString(a.line)
		buf.WriteByte('\n')
	}
	for _, r := range ipv4 {
		buf.WriteString(r)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

// rpslNetname returns the netname a block is published under. Customers
// known only by netname use one netname for all their ranges, so that the
// importer groups them as one organisation.
func rpslNetname(b *block) string {
	if b.org != nil && b.org.handle == "" {
		return fmt.Sprintf("%s-NET-%d", b.org.stem, b.org.idx+1)
	}
	return b.netname
}

func (w *World) rpslFiles() (inet, orgs map[string][]byte) {
	inet = map[string][]byte{}
	orgs = map[string][]byte{}
	bufs := map[string]*bytes.Buffer{}
	named := map[string][]*org{}
	seen := map[string]map[*org]bool{}
	for _, reg := range registries {
		bufs[reg] = &bytes.Buffer{}
		seen[reg] = map[*org]bool{}
		fmt.Fprintf(bufs[reg], "%% %s inetnum objects of the micra emulated Internet\n\n", rpslSource(reg))
	}
	for i := range w.blocks {
		br := &w.blocks[i]
		b := br.b
		switch b.kind {
		case bRoot, bRegistry, bAlloc:
			continue
		}
		reg := w.allocRegistry(i)
		if reg == "" {
			continue
		}
		buf := bufs[reg]
		src := rpslSource(reg)
		cc := b.country
		if cc == "" {
			cc = w.lat.locs[br.loc].Country
		}
		kv := func(k, v string) { fmt.Fprintf(buf, "%-16s%s\n", k+":", v) }
		kv("inetnum", u32addr(br.start).String()+" - "+u32addr(br.end).String())
		kv("netname", rpslNetname(b))
		if b.descr != "" {
			kv("descr", b.descr)
		}
		kv("country", cc)
		if b.org != nil && b.org.handle != "" {
			kv("org", b.org.handle)
			if !seen[reg][b.org] {
				seen[reg][b.org] = true
				named[reg] = append(named[reg], b.org)
			}
		}
		nic := "NOC1-" + src
		if b.org != nil {
			nic = fmt.Sprintf("%s%d-%s", b.org.stem[:2], b.org.idx+1, src)
		}
		kv("admin-c", nic)
		kv("tech-c", nic)
		kv("status", b.status)
		if b.org != nil {
			kv("mnt-by", b.org.stem+"-MNT")
		}
		kv("source", src)
		buf.WriteByte('\n')
	}
	for _, reg := range registries {
		inet[reg] = bufs[reg].Bytes()
		var ob bytes.Buffer
		fmt.Fprintf(&ob, "%% %s organisation objects of the micra emulated Internet\n\n", rpslSource(reg))
		os := named[reg]
		slices.SortFunc(os, func(a, b *org) int { return strings.Compare(a.handle, b.handle) })
		for _, o := range os {
			kv := func(k, v string) { fmt.Fprintf(&ob, "%-16s%s\n", k+":", v) }
			kv("organisation", o.handle)
			kv("org-name", o.name)
			kv("org-type", orgType(o))
			kv("country", o.country)
			kv("address", w.lat.locs[o.home].City)
			kv("e-mail", "noc@"+strings.ToLower(o.stem)+".example")
			kv("mnt-ref", o.stem+"-MNT")
			kv("mnt-by", o.stem+"-MNT")
			kv("source", rpslSource(reg))
			ob.WriteByte('\n')
		}
		orgs[reg] = ob.Bytes()
	}
	return inet, orgs
}

func orgType(o *org) string {
	switch o.kind {
	case orgHosting, orgISP, orgCDN:
		return "LIR"
	}
	return "OTHER"
}
