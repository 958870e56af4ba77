// kiln::text, all of it: vocabularies, BERT's tokenizer, the WordPiece trainer, corpora and MLM batches.
#pragma once

#include "kiln/text/bert_tokenizer.h"
#include "kiln/text/vocab.h"
