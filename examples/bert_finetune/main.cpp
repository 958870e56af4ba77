// Fine-tunes a BERT saved by Hugging Face's save_pretrained (config.json + model.safetensors)
// for sentence classification: the tokenizer, the pre-trained weights with a fresh classifier,
// AdamW with no decay for biases and LayerNorm, a linear warm-up schedule.
// Usage: bert_finetune MODEL_DIR VOCAB_TXT [STEPS]
#include <iostream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

int main(int argc, char** argv) try {
  if (argc < 3) {
    std::cerr << "usage: bert_finetune MODEL_DIR VOCAB_TXT [STEPS]\n";
    return 2;
  }
  const int64_t steps = argc > 3 ? std::stoll(argv[3]) : 40;
  kiln::manual_seed(0);
  auto tok = kiln::text::BertTokenizer::from_file(argv[2]);
  kiln::models::BertConfig cfg = kiln::models::BertConfig::from_pretrained(argv[1]);
  cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0;
  auto model = kiln::models::bert_for_sequence_classification(cfg, 2);
  for (const std::string& key : kiln::models::load_pretrained(*model, argv[1]))
    std::cout << "newly initialised: " << key << "\n";

  // label 1: the sentence likes the film.
  const std::vector<std::pair<std::string, int64_t>> data = {
      {"I loved this film, the acting was great", 1}, {"a wonderful story and lovely music", 1},
      {"we really enjoyed it", 1},                    {"the best movie I saw", 1},
      {"the plot was boring and dull", 0},            {"awful acting, a terrible film", 0},
      {"I hated the end", 0},                         {"the worst book, very weak", 0}};
  const int64_t B = static_cast<int64_t>(data.size()), S = 16;
  kiln::Tensor ids = kiln::zeros({B, S}, kiln::kInt64), mask = kiln::zeros({B, S}, kiln::kInt64),
               labels = kiln::empty({B}, kiln::kInt64);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int64_t> e = tok.encode(data[b].first, true, S);
    for (size_t s = 0; s < e.size(); ++s) {
      ids.data_ptr<int64_t>()[b * S + static_cast<int64_t>(s)] = e[s];
      mask.data_ptr<int64_t>()[b * S + static_cast<int64_t>(s)] = 1;
    }
    labels.data_ptr<int64_t>()[b] = data[b].second;
  }

  std::vector<kiln::Tensor> decay, no_decay;
  for (auto& [name, p] : model->named_parameters())
    (name.find("bias") != std::string::npos || name.find("LayerNorm") != std::string::npos ? no_decay : decay)
        .push_back(p);
  kiln::optim::AdamW opt({kiln::optim::OptimizerParamGroup(decay),
                          kiln::optim::OptimizerParamGroup(no_decay, {{"weight_decay", 0.0}})},
                         {.lr = 5e-3, .weight_decay = 0.01});
  auto sched = kiln::optim::linear_schedule_with_warmup(opt, steps / 10, steps);
  double first = 0, last = 0;
  for (int64_t step = 0; step < steps; ++step) {
    kiln::Tensor loss = kiln::nn::functional::cross_entropy(model(ids, mask), labels);
    opt.zero_grad();
    loss.backward();
    kiln::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    opt.step();
    sched->step();
    last = loss.item<double>();
    if (step == 0) first = last;
  }
  kiln::NoGradGuard no_grad;
  model->eval();
  const int64_t correct = kiln::argmax(model(ids, mask), 1).eq(labels).sum().item<int64_t>();
  std::cout << "fine-tuned " << steps << " steps: loss " << first << " -> " << last << ", " << correct << "/" << B
            << " training sentences right\n";
} catch (const std::exception& e) {  // kiln::Error, or a STEPS that is not a number
  std::cerr << "bert_finetune: " << e.what() << "\n";
  return 1;
}
