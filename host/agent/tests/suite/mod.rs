mod transcript;
