package world

import "strings"

// vocabulary is the word list page text, titles, slugs and names are drawn
// from. Words are common English nouns, verbs and adjectives, so that the
// crawler's keyword extraction, stemming and stop-word handling see
// realistic text. The order matters for determinism: append only.
var vocabulary = strings.Fields(`
garden river mountain forest ocean valley island harbor bridge castle village city market station
library museum theater school college university hospital kitchen bakery coffee tea bread cheese
apple orange lemon cherry grape melon tomato potato carrot onion pepper garlic ginger honey sugar
salt butter cream milk yogurt pasta rice noodle soup salad sandwich pizza burger sausage chicken
salmon tuna shrimp oyster lobster crab beef lamb pork turkey duck rabbit horse cattle sheep goat
wolf fox bear eagle falcon hawk owl sparrow robin swan heron crane dolphin whale shark turtle frog
lizard snake spider beetle butterfly bee ant moth dragonfly flower rose tulip lily orchid daisy
sunflower lavender jasmine maple oak pine cedar birch willow bamboo cactus fern moss mushroom
autumn winter spring summer morning evening night sunrise sunset storm thunder lightning rain snow
frost wind breeze cloud rainbow weather climate season holiday festival concert album guitar piano
violin drum trumpet orchestra melody rhythm harmony song singer dancer painter sculptor poet writer
novel story chapter poem essay journal magazine newspaper article review report letter diary
camera photo picture portrait landscape gallery exhibit collection archive catalog index manual
guide tutorial lesson course lecture seminar workshop conference meeting interview podcast video
movie cinema series episode season trailer premiere director actor producer studio network channel
computer laptop tablet phone keyboard monitor printer scanner router server cable battery charger
software hardware program database network protocol internet website browser search engine crawler
algorithm compiler kernel memory storage processor circuit signal sensor robot drone satellite
rocket planet comet galaxy telescope microscope laboratory experiment theory research science
physics chemistry biology geology astronomy mathematics statistics economics history geography
philosophy language grammar vocabulary dictionary translation culture tradition heritage ancestry
family children parents grandmother grandfather cousin neighbor friend partner colleague teacher
student doctor nurse engineer architect lawyer farmer fisherman carpenter plumber electrician baker
chef waiter pilot sailor soldier captain sergeant officer judge mayor minister president senator
election campaign policy budget taxes economy market stock bond investment bank credit loan mortgage
insurance pension salary wage income profit revenue expense invoice receipt payment contract lease
property house apartment cottage cabin villa mansion tower office factory warehouse workshop garage
shop store boutique supermarket pharmacy clinic salon gym stadium arena pool court field track
football soccer tennis golf cricket baseball basketball hockey rugby cycling running swimming skiing
climbing hiking camping fishing hunting sailing rowing surfing skating boxing wrestling chess puzzle
game toy doll kite balloon candle lantern mirror window door roof wall floor stair chimney fence gate
table chair sofa bed pillow blanket carpet curtain lamp shelf drawer cupboard basket bucket bottle
glass plate bowl spoon fork knife kettle oven stove fridge freezer washer dryer vacuum broom hammer
wrench drill saw ladder rope chain nail screw bolt brick stone marble granite timber steel copper
silver gold iron aluminum plastic rubber leather cotton wool silk linen denim velvet paper cardboard
engine motor wheel tire brake gear clutch pedal saddle helmet jacket sweater shirt trousers skirt dress
shoes boots sandals gloves scarf hat umbrella wallet purse backpack suitcase ticket passport visa map
compass journey voyage trip tour cruise flight airport terminal platform subway tram bus taxi bicycle
scooter truck tractor ferry yacht canoe harbor lighthouse beach coast cliff cave canyon desert glacier
volcano prairie meadow swamp lake pond stream waterfall spring fountain well canal dam reservoir
energy solar wind hydro nuclear coal oil gas petrol diesel electricity power voltage current grid
recycling compost pollution emission carbon climate conservation wildlife habitat species ecosystem
agriculture harvest orchard vineyard wine beer cider whiskey brewery distillery winery recipe menu
dinner lunch breakfast brunch picnic banquet feast dessert cake cookie pie tart pudding chocolate
vanilla cinnamon nutmeg saffron basil oregano thyme rosemary parsley mint dill chili curry sauce
quick slow bright dark quiet loud gentle fierce ancient modern rural urban coastal northern southern
eastern western central global local national regional annual weekly daily hourly rapid steady
golden silver crimson azure emerald amber ivory scarlet violet indigo olive copper rusty frosty sunny
windy rainy snowy misty stormy calm wild brave clever curious eager happy lucky proud quiet noble
simple elegant rustic classic vintage fresh organic natural digital virtual mobile smart secure open
free public private social civic royal grand little tiny giant huge vast narrow broad deep shallow
build design create develop explore discover invent improve measure analyze compare collect gather
share publish print broadcast stream record capture paint draw sketch carve weave knit sew bake cook
grill roast boil brew ferment pickle plant grow prune harvest sail fly drive ride walk climb swim
travel visit return arrive depart celebrate remember imagine wonder learn teach study practice train
`)

// nameWords are the words company and site names are built from.
var nameWords = strings.Fields(`
north south east west blue green red white black silver golden bright clear swift rapid prime
alpha nova terra aqua sol luna stella astro orbit vector pixel byte core nexus apex summit peak
ridge harbor bay river lake forest oak pine cedar maple willow falcon eagle hawk raven fox wolf
lion tiger bear otter lynx orca delta sigma omega zenith horizon meridian polar coral amber jade
onyx cobalt iron steel stone rock crystal spark flash wave tide stream flow pulse beacon signal
atlas titan vertex quantum fusion hyper ultra mega micro nano cloud sky star sun moon comet
`)
