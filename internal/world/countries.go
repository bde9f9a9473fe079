package world

// country is what the world knows of one country of the latency data: its
// ISO 3166 alpha-2 code as the RIR files publish it, the Regional Internet
// Registry that serves it, its top-level domain, the usual suffix of a
// company name there, and the region whose paths its traffic shares in the
// embedded latency model (latmodel.go): na North America, ca Central
// America, sa South America, eu Western, Central and Northern Europe, ee
// South-Eastern and Eastern Europe, ru Russia and Central Asia, me the
// Middle East and Caucasus, naf North Africa, af Sub-Saharan Africa, sas
// South Asia, eas East Asia, sea South-East Asia, oc Oceania.
type country struct {
	code, registry, tld, suffix, region string
}

// countries maps the country names of the WonderProxy servers file to their
// codes and registries. Every country of the 2020-07-19 file is listed; a
// server whose country is missing here is not used (and is reported by the
// loader's tests).
var countries = map[string]country{
	"Albania":              {"AL", "ripencc", "al", "Sh.p.k.", "ee"},
	"Algeria":              {"DZ", "afrinic", "dz", "SARL", "naf"},
	"Argentina":            {"AR", "lacnic", "com.ar", "S.A.", "sa"},
	"Australia":            {"AU", "apnic", "com.au", "Pty Ltd", "oc"},
	"Austria":              {"AT", "ripencc", "at", "GmbH", "eu"},
	"Bangladesh":           {"BD", "apnic", "com.bd", "Ltd", "sas"},
	"Belgium":              {"BE", "ripencc", "be", "BV", "eu"},
	"Brazil":               {"BR", "lacnic", "com.br", "Ltda", "sa"},
	"Bulgaria":             {"BG", "ripencc", "bg", "EOOD", "ee"},
	"Cambodia":             {"KH", "apnic", "com.kh", "Co., Ltd", "sea"},
	"Canada":               {"CA", "arin", "ca", "Inc.", "na"},
	"Chile":                {"CL", "lacnic", "cl", "SpA", "sa"},
	"China":                {"CN", "apnic", "cn", "Co., Ltd", "eas"},
	"Colombia":             {"CO", "lacnic", "com.co", "S.A.S.", "sa"},
	"Costa Rica":           {"CR", "lacnic", "cr", "S.A.", "ca"},
	"Croatia":              {"HR", "ripencc", "hr", "d.o.o.", "eu"},
	"Cyprus":               {"CY", "ripencc", "com.cy", "Ltd", "me"},
	"Czech Republic":       {"CZ", "ripencc", "cz", "s.r.o.", "eu"},
	"Denmark":              {"DK", "ripencc", "dk", "ApS", "eu"},
	"Ecuador":              {"EC", "lacnic", "ec", "S.A.", "sa"},
	"Egypt":                {"EG", "afrinic", "com.eg", "S.A.E.", "naf"},
	"Estonia":              {"EE", "ripencc", "ee", "OU", "eu"},
	"Finland":              {"FI", "ripencc", "fi", "Oy", "eu"},
	"France":               {"FR", "ripencc", "fr", "SAS", "eu"},
	"Georgia":              {"GE", "ripencc", "ge", "LLC", "me"},
	"Germany":              {"DE", "ripencc", "de", "GmbH", "eu"},
	"Ghana":                {"GH", "afrinic", "com.gh", "Ltd", "af"},
	"Greece":               {"GR", "ripencc", "gr", "S.A.", "ee"},
	"Guatemala":            {"GT", "lacnic", "com.gt", "S.A.", "ca"},
	"Honduras":             {"HN", "lacnic", "hn", "S.A.", "ca"},
	"Hong Kong":            {"HK", "apnic", "com.hk", "Ltd", "eas"},
	"Hungary":              {"HU", "ripencc", "hu", "Kft.", "eu"},
	"Iceland":              {"IS", "ripencc", "is", "ehf.", "eu"},
	"India":                {"IN", "apnic", "in", "Pvt Ltd", "sas"},
	"Indonesia":            {"ID", "apnic", "co.id", "PT", "sea"},
	"Ireland":              {"IE", "ripencc", "ie", "Ltd", "eu"},
	"Isle of Man":          {"IM", "ripencc", "im", "Ltd", "eu"},
	"Israel":               {"IL", "ripencc", "co.il", "Ltd", "me"},
	"Italy":                {"IT", "ripencc", "it", "S.r.l.", "eu"},
	"Japan":                {"JP", "apnic", "jp", "K.K.", "eas"},
	"Kazakhstan":           {"KZ", "ripencc", "kz", "LLP", "ru"},
	"Kenya":                {"KE", "afrinic", "co.ke", "Ltd", "af"},
	"Kosovo":               {"XK", "ripencc", "com", "Sh.p.k.", "ee"},
	"Latvia":               {"LV", "ripencc", "lv", "SIA", "eu"},
	"Lebanon":              {"LB", "ripencc", "com.lb", "SAL", "me"},
	"Lithuania":            {"LT", "ripencc", "lt", "UAB", "eu"},
	"Luxembourg":           {"LU", "ripencc", "lu", "S.A.", "eu"},
	"Malaysia":             {"MY", "apnic", "com.my", "Sdn Bhd", "sea"},
	"Malta":                {"MT", "ripencc", "com.mt", "Ltd", "eu"},
	"Mexico":               {"MX", "lacnic", "com.mx", "S.A. de C.V.", "ca"},
	"Moldova":              {"MD", "ripencc", "md", "SRL", "ee"},
	"Morocco":              {"MA", "afrinic", "ma", "SARL", "naf"},
	"Netherlands":          {"NL", "ripencc", "nl", "B.V.", "eu"},
	"New Zealand":          {"NZ", "apnic", "co.nz", "Ltd", "oc"},
	"Nigeria":              {"NG", "afrinic", "com.ng", "Ltd", "af"},
	"Norway":               {"NO", "ripencc", "no", "AS", "eu"},
	"Pakistan":             {"PK", "apnic", "com.pk", "Pvt Ltd", "sas"},
	"Panama":               {"PA", "lacnic", "com.pa", "S.A.", "ca"},
	"Peru":                 {"PE", "lacnic", "com.pe", "S.A.C.", "sa"},
	"Philippines":          {"PH", "apnic", "com.ph", "Inc.", "sea"},
	"Poland":               {"PL", "ripencc", "pl", "Sp. z o.o.", "eu"},
	"Portugal":             {"PT", "ripencc", "pt", "Lda", "eu"},
	"Puerto Rico":          {"PR", "arin", "com", "LLC", "na"},
	"Romania":              {"RO", "ripencc", "ro", "SRL", "ee"},
	"Russia":               {"RU", "ripencc", "ru", "LLC", "ru"},
	"Saudi Arabia":         {"SA", "ripencc", "com.sa", "Co.", "me"},
	"Serbia":               {"RS", "ripencc", "rs", "d.o.o.", "ee"},
	"Singapore":            {"SG", "apnic", "com.sg", "Pte Ltd", "sea"},
	"Slovakia":             {"SK", "ripencc", "sk", "s.r.o.", "eu"},
	"Slovenia":             {"SI", "ripencc", "si", "d.o.o.", "eu"},
	"South Africa":         {"ZA", "afrinic", "co.za", "(Pty) Ltd", "af"},
	"South Korea":          {"KR", "apnic", "co.kr", "Co., Ltd", "eas"},
	"Spain":                {"ES", "ripencc", "es", "S.L.", "eu"},
	"Suriname":             {"SR", "lacnic", "sr", "N.V.", "sa"},
	"Sweden":               {"SE", "ripencc", "se", "AB", "eu"},
	"Switzerland":          {"CH", "ripencc", "ch", "AG", "eu"},
	"Taiwan":               {"TW", "apnic", "com.tw", "Co., Ltd", "eas"},
	"Tanzania":             {"TZ", "afrinic", "co.tz", "Ltd", "af"},
	"Thailand":             {"TH", "apnic", "co.th", "Co., Ltd", "sea"},
	"Tunisia":              {"TN", "afrinic", "tn", "SARL", "naf"},
	"Turkey":               {"TR", "ripencc", "com.tr", "A.S.", "me"},
	"Uganda":               {"UG", "afrinic", "co.ug", "Ltd", "af"},
	"Ukraine":              {"UA", "ripencc", "com.ua", "LLC", "ee"},
	"United Arab Emirates": {"AE", "ripencc", "ae", "LLC", "me"},
	"United Kingdom":       {"GB", "ripencc", "co.uk", "Ltd", "eu"},
	"United States":        {"US", "arin", "com", "Inc.", "na"},
	"Uruguay":              {"UY", "lacnic", "com.uy", "S.A.", "sa"},
	"Venezuela":            {"VE", "lacnic", "com.ve", "C.A.", "sa"},
	"Vietnam":              {"VN", "apnic", "vn", "JSC", "sea"},
}

// registries lists the five RIRs in a fixed order: the order of the
// world's delegated files and of the RPSL sources.
var registries = []string{"afrinic", "apnic", "arin", "lacnic", "ripencc"}

// rpslSource returns the RPSL "source:" value of a registry, as the
// subnet importer maps back to the registry name.
func rpslSource(reg string) string {
	switch reg {
	case "ripencc":
		return "RIPE"
	case "afrinic":
		return "AFRINIC"
	case "apnic":
		return "APNIC"
	case "arin":
		return "ARIN"
	case "lacnic":
		return "LACNIC"
	}
	return "IANA"
}
