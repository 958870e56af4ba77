// kiln::text, all of it: vocabularies, BERT's tokenizer, the WordPiece trainer, corpora and MLM batches.
#pragma once

#include "kiln/text/bert_tokenizer.h"
#include "kiln/text/corpus.h"
#include "kiln/text/mlm.h"
#include "kiln/text/vocab.h"
#include "kiln/text/wordpiece_trainer.h"
